from datekit import Date, add_days, add_months, day_of_year, days_in_month, is_leap, parse_date, weekday


def test_common_leap_years():
    assert is_leap(2024)
    assert not is_leap(2023)


def test_days_in_month():
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 4) == 30
    assert days_in_month(2024, 2) == 29


def test_parse_iso():
    assert parse_date("2024-03-05") == Date(2024, 3, 5)


def test_parse_day_first():
    assert parse_date("05/03/2024") == Date(2024, 3, 5)


def test_parse_long_form():
    assert parse_date("March 5, 2024") == Date(2024, 3, 5)


def test_add_days_across_year():
    assert add_days(Date(2023, 12, 30), 3) == Date(2024, 1, 2)


def test_add_months_simple():
    assert add_months(Date(2024, 1, 15), 2) == Date(2024, 3, 15)


def test_weekday():
    assert weekday(Date(2024, 3, 5)) == "Tuesday"


def test_day_of_year_first_day():
    assert day_of_year(Date(2023, 1, 1)) == 1


def test_isoformat():
    assert Date(2024, 3, 5).isoformat() == "2024-03-05"
