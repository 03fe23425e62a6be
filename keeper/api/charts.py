"""Pure data -> SVG string functions for the status page's pictures.

No I/O, no clock, no database: each function takes numbers and labels and
returns markup, so it is tested on its own and renders the same everywhere.
Coordinates are integers computed with integer arithmetic (``value * height
// top``), so amounts of any size never pass through a float.

Colour is never the only cue: every series has a fill pattern (solid,
hatched, dotted, crossed, striped) named in a legend, every mark carries a
``<title>`` (the browser's tooltip and the screen reader's text), and every
chart has a ``<title>``/``<desc>`` and a data table beside it.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

__all__ = [
    "PATTERNS",
    "BarSeries",
    "bar_chart",
    "compact_int",
    "legend",
    "line_chart",
    "nice_ticks",
    "pattern_defs",
    "time_label",
]

WIDTH: Final = 480
HEIGHT: Final = 190
LEFT: Final = 78
RIGHT: Final = 12
TOP: Final = 10
BOTTOM: Final = 34
PLOT_W: Final = WIDTH - LEFT - RIGHT
PLOT_H: Final = HEIGHT - TOP - BOTTOM

# name -> (pattern body, colour); bodies draw on a 6x6 tile
PATTERNS: Final[dict[str, tuple[str, str]]] = {
    "solid": ("", "#2f6f4f"),
    "hatch": ('<path d="M-1,1 l2,-2 M0,6 l6,-6 M5,7 l2,-2" stroke-width="1.6"/>', "#a3471f"),
    "dots": ('<circle cx="3" cy="3" r="1.5"/>', "#6b3fa0"),
    "cross": ('<path d="M0,0 l6,6 M6,0 l-6,6" stroke-width="1.1"/>', "#b8860b"),
    "stripes": ('<path d="M0,3 h6" stroke-width="2"/>', "#1f5fa3"),
    "grid": ('<path d="M3,0 v6 M0,3 h6" stroke-width="1"/>', "#55606e"),
    "rings": ('<circle cx="3" cy="3" r="2" fill="none" stroke-width="1"/>', "#8a1414"),
    "blank": ('<rect x="1" y="1" width="4" height="4" fill="#fff" stroke-width=".6"/>', "#6b7285"),
}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def pattern_defs() -> str:
    """One hidden SVG holding every fill pattern, referenced as ``url(#pat-NAME)``."""
    parts = []
    for name, (body, colour) in PATTERNS.items():
        if not body:
            inner = f'<rect width="6" height="6" fill="{colour}"/>'
        else:
            inner = (
                f'<rect width="6" height="6" fill="#fff"/>'
                f'<g stroke="{colour}" fill="{colour}">{body}</g>'
            )
        parts.append(
            f'<pattern id="pat-{name}" width="6" height="6" patternUnits="userSpaceOnUse">'
            f"{inner}</pattern>"
        )
    return (
        '<svg width="0" height="0" style="position:absolute" aria-hidden="true">'
        f"<defs>{''.join(parts)}</defs></svg>"
    )


def legend(items: Sequence[tuple[str, str]]) -> str:
    """An HTML legend: (pattern name, label) pairs, each with a swatch of its pattern."""
    lis = "".join(
        f'<li><svg width="14" height="14" aria-hidden="true"><rect width="14" height="14" '
        f'fill="url(#pat-{_e(p)})" stroke="#333" stroke-width="1"/></svg> {_e(label)}</li>'
        for p, label in items
    )
    return f'<ul class="legend">{lis}</ul>'


def nice_ticks(top: int, count: int = 4) -> list[int]:
    """Axis ticks 0, s, 2s, ... reaching ``top``, with s a 1, 2 or 5 times a power of ten.

    Integers only: ``top`` may be a uint256 amount. ``top <= 0`` gives ``[0, 1]``.
    """
    if top <= 0:
        return [0, 1]
    raw = -(-top // count)  # ceil
    magnitude = 10 ** (len(str(raw)) - 1)
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    n = -(-top // step)
    return [i * step for i in range(n + 1)]


def compact_int(value: int) -> str:
    """A short label for an integer: ``1234``, or ``1.23e60`` (digits cut, not rounded)."""
    digits = str(abs(value))
    sign = "-" if value < 0 else ""
    if len(digits) <= 7:
        return sign + digits
    mantissa = digits[0] + ("." + digits[1:3].rstrip("0") if digits[1:3].strip("0") else "")
    return f"{sign}{mantissa}e{len(digits) - 1}"


def time_label(timestamp: int, span: int) -> str:
    """A UTC time label fit for an axis spanning ``span`` seconds."""
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.strftime("%a %H:%M" if span > 2 * 86400 else "%H:%M")


def _y(value: int, top: int) -> int:
    clipped = min(max(value, 0), top)
    return TOP + PLOT_H - clipped * PLOT_H // top


def _x(index: int, slots: int) -> int:
    return LEFT + index * PLOT_W // max(slots, 1)


def _frame(
    chart_id: str, title: str, desc: str, ticks: Sequence[int], y_label: Callable[[int], str],
    x_marks: Sequence[tuple[int, str]], x_title: str, body: str,
) -> str:  # fmt: skip
    top = ticks[-1]
    grid = "".join(
        f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_y(t, top)}" '
        f'y2="{_y(t, top)}"/><text class="y-tick" x="{LEFT - 6}" y="{_y(t, top) + 4}" '
        f'text-anchor="end">{_e(y_label(t))}</text>'
        for t in ticks
    )
    xs = "".join(
        f'<line class="axis" x1="{x}" x2="{x}" y1="{TOP + PLOT_H}" y2="{TOP + PLOT_H + 4}"/>'
        f'<text class="x-tick" x="{x}" y="{TOP + PLOT_H + 16}" '
        # a label at either edge of the plot is anchored inward so it is never cut off
        f'text-anchor="{"end" if x > WIDTH - RIGHT - 20 else "middle"}">{_e(label)}</text>'
        for x, label in x_marks
    )
    axes = (
        f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + PLOT_H}"/>'
        f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + PLOT_H}" '
        f'y2="{TOP + PLOT_H}"/>'
        f'<text class="x-title" x="{LEFT + PLOT_W // 2}" y="{HEIGHT - 2}" '
        f'text-anchor="middle">{_e(x_title)}</text>'
    )
    cid = _e(chart_id)
    return (
        f'<svg class="chart" id="{cid}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-labelledby="{cid}-title {cid}-desc" preserveAspectRatio="xMidYMid meet">'
        f'<title id="{cid}-title">{_e(title)}</title><desc id="{cid}-desc">{_e(desc)}</desc>'
        f"{grid}{axes}{xs}{body}</svg>"
    )


def _time_marks(edges: Sequence[int], slots: int, labels: int = 5) -> list[tuple[int, str]]:
    span = edges[-1] - edges[0] if len(edges) > 1 else 0
    step = max(1, (len(edges) - 1) // labels)
    return [(_x(i, slots), time_label(edges[i], span)) for i in range(0, len(edges), step)]


def line_chart(
    chart_id: str,
    title: str,
    edges: Sequence[int],
    values: Sequence[int],
    value_label: Callable[[int], str],
    axis_label: Callable[[int], str],
) -> str:
    """A step line of ``values`` at the timestamps ``edges``, one marked point per edge.

    ``value_label`` writes a point's full amount (its tooltip), ``axis_label`` the
    y-axis ticks' shorter form.
    """
    if len(edges) != len(values) or not edges:
        raise ValueError(f"{len(edges)} edges for {len(values)} values")
    ticks = nice_ticks(max(values))
    top = ticks[-1]
    slots = len(edges) - 1
    coords = [(_x(i, slots), _y(v, top)) for i, v in enumerate(values)]
    path = f"M{coords[0][0]},{coords[0][1]}" + "".join(f" H{x} V{y}" for (x, y) in coords[1:])
    span = edges[-1] - edges[0]
    radius = "2.5" if slots <= 30 else "1.8"
    points = "".join(
        f'<circle class="point" cx="{x}" cy="{y}" r="{radius}" data-value="{v}">'
        f"<title>{_e(time_label(t, span))} UTC: {_e(value_label(v))}</title></circle>"
        for (x, y), t, v in zip(coords, edges, values, strict=True)
    )
    body = f'<path class="line" d="{path}"/>{points}'
    desc = (
        f"{len(values)} points from {time_label(edges[0], span)} to "
        f"{time_label(edges[-1], span)} UTC; now {value_label(values[-1])}, "
        f"highest {value_label(max(values))}."
    )
    marks = _time_marks(edges, slots)
    return _frame(chart_id, title, desc, ticks, axis_label, marks, "time (UTC, chain time)", body)


@dataclass(frozen=True, slots=True)
class BarSeries:
    """One stacked category: its label, fill pattern and a count per slot."""

    label: str
    pattern: str
    counts: Sequence[int]


def bar_chart(
    chart_id: str,
    title: str,
    slot_labels: Sequence[str],
    series: Sequence[BarSeries],
    x_marks: Sequence[tuple[int, str]],
    x_title: str,
) -> str:
    """Stacked bars, one per slot; ``x_marks`` are (slot index, label) for the axis.

    Each segment is a ``rect.bar`` whose ``<title>`` names its slot, category and
    count, so the picture can be read (and tested) without its colours.
    """
    slots = len(slot_labels)
    if slots == 0 or any(len(s.counts) != slots for s in series):
        raise ValueError("every series needs one count per slot, and at least one slot")
    totals = [sum(s.counts[i] for s in series) for i in range(slots)]
    ticks = nice_ticks(max(totals), 3)
    top = ticks[-1]
    gap = 1 if PLOT_W // slots > 3 else 0
    rects = []
    for i in range(slots):
        x0, x1 = _x(i, slots), _x(i + 1, slots)
        base = 0
        for s in series:
            n = s.counts[i]
            if n <= 0:
                continue
            y_top, y_bottom = _y(base + n, top), _y(base, top)
            rects.append(
                f'<rect class="bar" x="{x0 + gap}" y="{y_top}" width="{max(1, x1 - x0 - gap)}" '
                f'height="{max(1, y_bottom - y_top)}" fill="url(#pat-{_e(s.pattern)})" '
                f'data-series="{_e(s.label)}" data-count="{n}">'
                f"<title>{_e(slot_labels[i])}: {n} {_e(s.label)}</title></rect>"
            )
            base += n
    parts = ", ".join(f"{sum(s.counts)} {s.label}" for s in series)
    desc = f"{slots} bars, {sum(totals)} in all: {parts}."
    marks = [(_x(i, slots) + (_x(i + 1, slots) - _x(i, slots)) // 2, lab) for i, lab in x_marks]
    return _frame(chart_id, title, desc, ticks, compact_int, marks, x_title, "".join(rects))
