from datekit import Date, add_months


def test_clamps_to_end_of_february():
    assert add_months(Date(2023, 1, 31), 1) == Date(2023, 2, 28)
    assert add_months(Date(2024, 1, 31), 1) == Date(2024, 2, 29)


def test_clamps_backwards():
    assert add_months(Date(2024, 3, 31), -1) == Date(2024, 2, 29)
