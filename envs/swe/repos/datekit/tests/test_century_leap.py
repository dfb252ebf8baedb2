from datekit import Date, add_days, days_in_month, is_leap


def test_century_rule():
    assert is_leap(2000)
    assert not is_leap(1900)


def test_february_2000():
    assert days_in_month(2000, 2) == 29
    assert add_days(Date(2000, 2, 28), 1) == Date(2000, 2, 29)
