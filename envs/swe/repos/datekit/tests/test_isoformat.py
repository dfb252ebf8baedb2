from datekit import Date, parse_date


def test_pads_early_years():
    assert Date(7, 1, 2).isoformat() == "0007-01-02"
    assert Date(987, 12, 31).isoformat() == "0987-12-31"


def test_round_trip_early_year():
    assert parse_date(Date(45, 6, 7).isoformat()) == Date(45, 6, 7)
