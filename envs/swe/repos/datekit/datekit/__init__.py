"""datekit: small calendar arithmetic and date parsing without the datetime module."""
from datekit.core import (
    Date, add_days, add_months, day_of_year, days_in_month, is_leap, parse_date, weekday,
)

__all__ = ["Date", "add_days", "add_months", "day_of_year", "days_in_month", "is_leap", "parse_date", "weekday"]
