"""The usage report as CSV, safe to open in a spreadsheet.

A cell that starts with = + - @ (or a tab or carriage return) would run as a formula in
Excel, LibreOffice or Sheets, and user and profile names are chosen by people; such a cell
gets a leading apostrophe so the spreadsheet shows it as text.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from .report import Report, Usage

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
COUNTS = ["runs", "input_tokens", "output_tokens", "total_tokens", "unpriced_runs"]


def header(currencies: list[str]) -> list[str]:
    """The column names: one cost column per currency, so no column mixes currencies."""
    return ["group", "key", *COUNTS, *(f"cost_{currency}" for currency in currencies)]


def safe_cell(value: object) -> str:
    """``value`` as text a spreadsheet will not evaluate."""
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _line(group: str, usage: Usage, currencies: list[str]) -> list[str]:
    counts = [
        usage.runs,
        usage.input_tokens,
        usage.output_tokens,
        usage.tokens,
        usage.unpriced_runs,
    ]
    costs = [f"{usage.cost_in(currency).normalize():f}" for currency in currencies]
    return [group, usage.key, *map(str, counts), *costs]


def rows(report: Report) -> Iterator[list[str]]:
    """Every line of the CSV, header first: each day, user and profile, then the total."""
    yield header(report.currencies)
    groups = (
        [("day", usage) for usage in report.days]
        + [("user", usage) for usage in report.users]
        + [("profile", usage) for usage in report.profiles]
        + [("total", report.total)]
    )
    for group, usage in groups:
        yield [safe_cell(cell) for cell in _line(group, usage, report.currencies)]


def to_csv(report: Report) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows(report))
    return buffer.getvalue()


def filename(report: Report) -> str:
    return f"usage-{report.period.start.isoformat()}-{report.period.end.isoformat()}.csv"
