"""Server-rendered SVG bar charts: no script, no CDN, labels escaped, read out by screen readers.

Geometry only scales the bars; the exact figures live in each bar's <title> and in the
table beneath the chart. Colours come from classes in zett.css, since the CSP forbids
inline styles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

COLUMN_PLOT_HEIGHT = 160
COLUMN_STEP = 24  # horizontal room per day
COLUMN_TOP = 24
LABEL_WIDTH = 170  # room for a name left of a horizontal bar
BAR_ROW = 26
BAR_MAX_WIDTH = 360
NAME_CHARS = 22


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: what it stands for, its size, and its figure as people read it."""

    label: str
    value: Decimal
    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.value, Decimal) or self.value < 0:
            raise ValueError("a bar's value is a non-negative Decimal")


def _scaled(value: Decimal, maximum: Decimal, room: int) -> int:
    if maximum <= 0 or value <= 0:
        return 0
    # A bar of a non-zero value stays visible however small it is.
    return max(1, int(value * room / maximum))


def _short(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def _frame(
    chart_id: str, title: str, desc: str, width: int, height: int, body: SafeString
) -> SafeString:
    return format_html(
        '<svg class="usage-chart" id="{id}" role="img" aria-labelledby="{id}-title {id}-desc" '
        'viewBox="0 0 {w} {h}" width="{w}" height="{h}" preserveAspectRatio="xMinYMin meet" '
        'xmlns="http://www.w3.org/2000/svg" data-testid="usage-chart">'
        '<title id="{id}-title">{title}</title><desc id="{id}-desc">{desc}</desc>{body}</svg>',
        id=chart_id,
        w=width,
        h=height,
        title=title,
        desc=desc,
        body=body,
    )


def columns(chart_id: str, title: str, desc: str, bars: Sequence[Bar]) -> SafeString:
    """A vertical bar per item (days, left to right), with the largest figure on the axis."""
    maximum = max((bar.value for bar in bars), default=Decimal(0))
    width = max(320, len(bars) * COLUMN_STEP + 16)
    base = COLUMN_TOP + COLUMN_PLOT_HEIGHT
    # Label a readable subset of days: about eight, counted back from the last (today).
    every = max(1, -(-len(bars) // 8))
    last = len(bars) - 1
    shapes = []
    for index, bar in enumerate(bars):
        height = _scaled(bar.value, maximum, COLUMN_PLOT_HEIGHT)
        x = 8 + index * COLUMN_STEP
        shapes.append(
            format_html(
                '<g class="usage-bar"><title>{label}: {text}</title>'
                '<rect x="{x}" y="{y}" width="{w}" height="{h}"></rect></g>',
                label=bar.label,
                text=bar.text,
                x=x + 3,
                y=base - height,
                w=COLUMN_STEP - 6,
                h=height,
            )
        )
        if (last - index) % every == 0:
            shapes.append(
                format_html(
                    '<text class="usage-axis" x="{x}" y="{y}" text-anchor="middle">{label}</text>',
                    x=x + COLUMN_STEP // 2,
                    y=base + 16,
                    label=bar.label[5:] if len(bar.label) == 10 else bar.label,
                )
            )
    top = next((bar.text for bar in bars if bar.value == maximum), "")
    axis = format_html(
        '<line class="usage-baseline" x1="4" y1="{y}" x2="{x2}" y2="{y}"></line>'
        '<text class="usage-axis" x="8" y="14">max {top}</text>',
        y=base,
        x2=width - 4,
        top=top if maximum > 0 else "nothing used",
    )
    body = format_html("{}{}", axis, format_html_join("", "{}", ((shape,) for shape in shapes)))
    return _frame(chart_id, title, desc, width, base + 26, body)


def bars(chart_id: str, title: str, desc: str, items: Sequence[Bar]) -> SafeString:
    """A horizontal bar per item (users, profiles), named on the left, its figure on the right."""
    maximum = max((item.value for item in items), default=Decimal(0))
    rows = []
    for index, item in enumerate(items):
        y = 8 + index * BAR_ROW
        rows.append(
            format_html(
                '<g class="usage-bar"><title>{label}: {text}</title>'
                '<text class="usage-name" x="{lx}" y="{ty}" text-anchor="end">{short}</text>'
                '<rect x="{x}" y="{y}" width="{w}" height="{h}"></rect>'
                '<text class="usage-figure" x="{fx}" y="{ty}">{text}</text></g>',
                label=item.label,
                short=_short(item.label),
                text=item.text,
                lx=LABEL_WIDTH - 8,
                x=LABEL_WIDTH,
                y=y,
                w=_scaled(item.value, maximum, BAR_MAX_WIDTH),
                h=BAR_ROW - 8,
                fx=LABEL_WIDTH + _scaled(item.value, maximum, BAR_MAX_WIDTH) + 6,
                ty=y + BAR_ROW // 2 + 1,
            )
        )
    body = format_html_join("", "{}", ((row,) for row in rows))
    height = max(BAR_ROW, len(items) * BAR_ROW + 8)
    return _frame(chart_id, title, desc, LABEL_WIDTH + BAR_MAX_WIDTH + 120, height, body)
