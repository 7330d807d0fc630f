"""The period a usage report covers, read from the query string (?period= or ?start=&end=)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from django.utils import timezone

PRESETS = {"7d": "Last 7 days", "30d": "Last 30 days", "month": "This month"}
DEFAULT_PRESET = "30d"
# A longer range makes a chart of unreadable slivers and a query over years of runs.
MAX_DAYS = 366


class PeriodError(ValueError):
    """The query string names no valid period; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class Period:
    """An inclusive range of calendar days in the site's time zone."""

    start: dt.date
    end: dt.date  # inclusive
    preset: str = ""  # the preset key it came from; "" for explicit dates

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise PeriodError("The end date is before the start date.")
        if (self.end - self.start).days + 1 > MAX_DAYS:
            raise PeriodError(f"A period can cover at most {MAX_DAYS} days.")

    @property
    def days(self) -> list[dt.date]:
        count = (self.end - self.start).days + 1
        return [self.start + dt.timedelta(days=offset) for offset in range(count)]

    @property
    def label(self) -> str:
        if self.preset:
            return PRESETS[self.preset]
        return f"{self.start.isoformat()} to {self.end.isoformat()}"

    def bounds(self) -> tuple[dt.datetime, dt.datetime]:
        """Aware datetimes [from, to) covering the days in the current time zone."""
        zone = timezone.get_current_timezone()
        since = dt.datetime.combine(self.start, dt.time.min, tzinfo=zone)
        until = dt.datetime.combine(self.end + dt.timedelta(days=1), dt.time.min, tzinfo=zone)
        return since, until


def preset(key: str, today: dt.date) -> Period:
    """The preset period ``key`` ending today."""
    if key == "7d":
        return Period(today - dt.timedelta(days=6), today, key)
    if key == "30d":
        return Period(today - dt.timedelta(days=29), today, key)
    if key == "month":
        return Period(today.replace(day=1), today, key)
    raise PeriodError(f"Unknown period {key!r}: choose one of {', '.join(PRESETS)}.")


def _date(value: str, which: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise PeriodError(f"The {which} date {value!r} is not a date like 2026-01-31.") from None


def parse(params: Mapping[str, str], today: dt.date | None = None) -> Period:
    """The period the query string asks for: explicit dates win over a preset.

    ``start`` alone runs to today; ``end`` alone is an error, because the start it needs
    cannot be guessed. Nothing given means the default preset.
    """
    today = today or timezone.localdate()
    start, end = params.get("start", "").strip(), params.get("end", "").strip()
    if start:
        return Period(_date(start, "start"), _date(end, "end") if end else today)
    if end:
        raise PeriodError("An end date needs a start date.")
    return preset(params.get("period", "").strip() or DEFAULT_PRESET, today)
