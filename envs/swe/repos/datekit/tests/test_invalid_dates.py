import pytest

from datekit import parse_date


def test_rejects_february_30():
    with pytest.raises(ValueError):
        parse_date("2023-02-30")


def test_rejects_month_13():
    with pytest.raises(ValueError):
        parse_date("31/13/2023")
