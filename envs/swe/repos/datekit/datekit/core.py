"""Proleptic Gregorian calendar helpers."""
from __future__ import annotations

import re
from typing import NamedTuple

MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


class Date(NamedTuple):
    year: int
    month: int
    day: int

    def isoformat(self) -> str:
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"


def is_leap(year: int) -> bool:
    """True for leap years: every 4th year, except centuries not divisible by 400."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")
    if month == 2:
        return 29 if is_leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def validate(year: int, month: int, day: int) -> Date:
    """A Date, or ValueError if the day does not exist."""
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")
    if not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"day {day} is out of range for {year:04d}-{month:02d}")
    return Date(year, month, day)


def day_of_year(d: Date) -> int:
    """1 for January 1st."""
    return sum(days_in_month(d.year, m) for m in range(1, d.month)) + d.day


def _ordinal(d: Date) -> int:
    """Days since 0001-01-01 (which is day 1)."""
    y = d.year - 1
    return y * 365 + y // 4 - y // 100 + y // 400 + day_of_year(d)


def _from_ordinal(n: int) -> Date:
    year = (n - 1) // 366 + 1
    while _ordinal(Date(year + 1, 1, 1)) <= n:
        year += 1
    rest = n - _ordinal(Date(year, 1, 1)) + 1
    month = 1
    while rest > days_in_month(year, month):
        rest -= days_in_month(year, month)
        month += 1
    return Date(year, month, rest)


def add_days(d: Date, days: int) -> Date:
    return _from_ordinal(_ordinal(d) + days)


def add_months(d: Date, months: int) -> Date:
    """Move by whole months; a day past the end of the target month is clamped to its last day."""
    index = d.year * 12 + (d.month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    return Date(year, month, min(d.day, days_in_month(year, month)))


def weekday(d: Date) -> str:
    """The weekday's English name (0001-01-01 was a Monday)."""
    return WEEKDAYS[(_ordinal(d) - 1) % 7]


_ISO = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})$")
_DMY = re.compile(r"^(\d{1,2})/(\d{1,2})/(\d{4})$")
_LONG = re.compile(r"^([A-Za-z]+)\s+(\d{1,2}),?\s+(\d{4})$")


def parse_date(text: str) -> Date:
    """Parse "2024-03-05", "05/03/2024" (day first) or "March 5, 2024"."""
    s = text.strip()
    if m := _ISO.match(s):
        return validate(int(m[1]), int(m[2]), int(m[3]))
    if m := _DMY.match(s):
        return validate(int(m[3]), int(m[2]), int(m[1]))
    if m := _LONG.match(s):
        name = m[1].lower()
        matches = [i for i, full in enumerate(MONTHS) if full == name or (len(name) >= 3 and full.startswith(name))]
        if len(matches) != 1:
            raise ValueError(f"unknown month name {m[1]!r}")
        return validate(int(m[3]), matches[0] + 1, int(m[2]))
    raise ValueError(f"unrecognised date {text!r}")
