from datekit import Date, parse_date


def test_capitalised_abbreviation():
    assert parse_date("Sept 9, 2021") == Date(2021, 9, 9)


def test_uppercase_abbreviation():
    assert parse_date("SEP 9 2021") == Date(2021, 9, 9)
