"""The status page's pictures as HTML sections: an :class:`Overview` in, markup out.

Pure (no I/O): the data comes from :func:`keeper.api.overview.read_overview`,
the SVG from :mod:`keeper.api.charts`. Each picture is followed by the same
numbers as a table (in a ``<details>``), and amounts are written in token
units beside base units wherever the token's ``decimals()`` is known.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Final

from keeper.api import charts
from keeper.api.overview import OUTCOMES, RANGES, VERIFICATION_STATUSES, LockedSeries, Overview
from keeper.domain.planner import ActionKind
from keeper.domain.tokens import format_units, group_digits
from keeper.store.tokens import TokenMeta

__all__ = ["amount_text", "render_pictures"]

_OUTCOME_PATTERNS: Final = dict(zip(OUTCOMES, ("solid", "hatch", "cross"), strict=True))
_STATUS_PATTERNS: Final = dict(
    zip(VERIFICATION_STATUSES, ("solid", "hatch", "cross", "dots", "stripes", "rings", "blank"),
        strict=True)
)  # fmt: skip
_STATUS_LABELS: Final = {
    "verified": "verified", "mismatch": "mismatch", "invalid_document": "invalid document",
    "evaluator_disagrees": "disagrees", "unavailable": "unavailable",
    "not_reproducible": "not reproducible", "pending": "not verified yet",
}  # fmt: skip
_ACTIONS: Final = tuple(a.value for a in ActionKind)
_ACTION_PATTERNS: Final = dict(zip(_ACTIONS, ("solid", "hatch", "dots", "cross"), strict=True))
_SHOWN_DEADLINES: Final = 10


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _unit_note(token: str, meta: TokenMeta | None) -> str | None:
    """Why an amount stays in base units, or None when token units can be shown."""
    if token == "":
        return "token not indexed: base units"
    if meta is None:
        return "token not read yet: base units"
    if meta.decimals is None:
        return "token did not answer decimals(): base units"
    return None


def amount_text(amount: int, token: str, meta: TokenMeta | None) -> str:
    """``1,234.5 USDC (1234500000 base units)``, or base units with the reason why."""
    note = _unit_note(token, meta)
    if note is not None or meta is None or meta.decimals is None:
        return f"{group_digits(str(amount))} base units ({note})"
    symbol = meta.symbol or "tokens (no symbol)"
    return f"{format_units(amount, meta.decimals)} {symbol} ({amount} base units)"


def _axis(token: str, meta: TokenMeta | None) -> tuple[str, Callable[[int], str]]:
    if _unit_note(token, meta) is None and meta is not None and meta.decimals is not None:
        decimals = meta.decimals
        return meta.symbol or "token units", lambda v: format_units(v, decimals, max_fraction=4)
    return "base units", charts.compact_int


def _slot_label(start: int, width: int, span: int) -> str:
    return f"{charts.time_label(start, span)} to {charts.time_label(start + width, span)} UTC"


def _details(summary: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f"<details><summary>{_e(summary)}</summary><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></details>"
    )


def _range_picker(current: str) -> str:
    links = []
    for name in RANGES:
        if name == current:
            links.append(f'<strong aria-current="page">last {_e(name)}</strong>')
        else:
            links.append(f'<a href="/?range={_e(name)}">last {_e(name)}</a>')
    return f'<nav class="ranges" aria-label="time range">Show: {" · ".join(links)}</nav>'


def _locked(view: Overview, names: Mapping[str, str]) -> str:
    if not view.locked:
        return '<p class="empty">No escrow held in this range.</p>'
    cards = []
    edges = view.edges
    span = edges[-1] - edges[0]
    for i, s in enumerate(view.locked):
        cards.append(_locked_card(f"locked-{i}", s, view.tokens.get(s.token), names, edges, span))
    hidden = (
        f'<p class="empty">{view.locked_hidden} more series not drawn (see the table below).</p>'
        if view.locked_hidden
        else ""
    )
    return f'<div class="cards">{"".join(cards)}</div>{hidden}'


def _locked_card(
    chart_id: str, s: LockedSeries, meta: TokenMeta | None, names: Mapping[str, str],
    edges: Sequence[int], span: int,
) -> str:  # fmt: skip
    contract = names.get(s.contract, s.contract)
    unit, axis = _axis(s.token, meta)
    symbol = meta.symbol if meta is not None else None
    token = symbol or _short(s.token) or "task market token"
    title = f"Escrow locked: {contract} · {token} · {s.kind}"
    svg = charts.line_chart(
        chart_id, title, edges, s.values, lambda v: amount_text(v, s.token, meta), axis
    )
    rows = [
        (_e(charts.time_label(t, span)), _e(amount_text(v, s.token, meta)))
        for t, v in zip(edges, s.values, strict=True)
    ]
    return (
        f'<figure class="card" data-contract="{_e(s.contract)}" data-token="{_e(s.token)}" '
        f'data-kind="{_e(s.kind)}"><figcaption><strong>{_e(contract)}</strong> · {_e(token)}'
        f' · {_e(s.kind)} <span class="unit">(y axis: {_e(unit)})</span></figcaption>{svg}'
        f'<p class="now">Now: <strong class="locked-now" data-base="{s.values[-1]}">'
        f"{_e(amount_text(s.values[-1], s.token, meta))}</strong></p>"
        f"{_details('Data table', ('time (UTC)', 'locked'), rows)}</figure>"
    )


def _short(address: str) -> str:
    return f"{address[:6]}…{address[-4:]}" if len(address) > 12 else address


def _bars(
    chart_id: str, title: str, view: Overview, counts: Mapping[str, Sequence[int]],
    patterns: Mapping[str, str], labels: Mapping[str, str],
) -> str:  # fmt: skip
    w = view.window
    span = w.width * w.buckets
    slots = [_slot_label(w.start + i * w.width, w.width, span) for i in range(w.buckets)]
    series = [charts.BarSeries(labels.get(k, k), patterns[k], counts[k]) for k in patterns]
    step = max(1, w.buckets // 5)
    marks = [(i, charts.time_label(w.start + i * w.width, span)) for i in range(0, w.buckets, step)]
    svg = charts.bar_chart(chart_id, title, slots, series, marks, "time (UTC, chain time)")
    keys = list(patterns)
    rows = [
        (_e(slots[i]), *(str(counts[k][i]) for k in keys))
        for i in range(w.buckets)
        if any(counts[k][i] for k in keys)
    ]
    table = _details("Data table", ("time", *(labels.get(k, k) for k in keys)), rows)
    legend = charts.legend([(patterns[k], labels.get(k, k)) for k in keys])
    return f"{legend}{svg}{table}"


def _deadlines(view: Overview, names: Mapping[str, str]) -> str:
    w = view.window
    span = w.width * w.buckets
    counts = {a: [0] * (w.buckets + 1) for a in _ACTIONS}
    for action in view.deadlines:
        slot = 0 if action.due_at <= view.now else 1 + (action.due_at - view.now - 1) // w.width
        if slot <= w.buckets:
            counts[action.action.value][slot] += 1
    slots = ["overdue (due now or before)"] + [
        _slot_label(view.now + i * w.width, w.width, span) for i in range(w.buckets)
    ]
    series = [charts.BarSeries(a, _ACTION_PATTERNS[a], counts[a]) for a in _ACTIONS]
    step = max(1, w.buckets // 4)
    marks = [(0, "overdue")] + [
        (1 + i, "+" + _duration(i * w.width)) for i in range(step, w.buckets, step)
    ]
    svg = charts.bar_chart(
        "deadlines", f"Keeper calls falling due in the next {view.range_name}", slots, series,
        marks, "time from now (chain time)",
    )  # fmt: skip
    overdue = sum(counts[a][0] for a in _ACTIONS)
    backlog = sum(view.intents_backlog.values())
    detail = ", ".join(f"{a}: {n}" for a, n in sorted(view.intents_backlog.items())) or "none"
    summary = (
        f'<p class="backlog">Keeper backlog: <strong id="overdue-count">{overdue}</strong> '
        f'call(s) due now and not yet made · <strong id="intents-count">{backlog}</strong> '
        f"decided and not finished ({_e(detail)}).</p>"
    )
    rows = [
        (
            _e(charts.time_label(a.due_at, span)) + (" (overdue)" if a.due_at <= view.now else ""),
            _e(a.action.value),
            f'<a href="/{"jobs" if a.action is ActionKind.CLAIM_REFUND else "tasks"}/'
            f'{_e(names.get(a.contract, a.contract))}/{_e(a.subject)}">'
            f"{_e(names.get(a.contract, a.contract))} {_e(a.subject[:18])}</a>",
        )
        for a in view.deadlines[:_SHOWN_DEADLINES]
    ]
    table = _details(
        f"Next {min(len(view.deadlines), _SHOWN_DEADLINES)} of {len(view.deadlines)} due",
        ("due (UTC)", "call", "subject"), rows,
    )  # fmt: skip
    legend = charts.legend([(_ACTION_PATTERNS[a], a) for a in _ACTIONS])
    return f"{summary}{legend}{svg}{table}"


def _duration(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m"


def _failures(view: Overview, names: Mapping[str, str]) -> str:
    if not view.failures:
        return '<p class="empty" id="no-failures">No failed verification in this range.</p>'
    span = view.window.width * view.window.buckets
    items = "".join(
        f'<li><span class="status">{_e(_STATUS_LABELS.get(f.status, f.status))}</span> '
        f"{_e(names.get(f.contract, f.contract))} job {_e(f.job_id)} at "
        f"{_e(charts.time_label(f.block_timestamp, span))} UTC: "
        f'<a class="report" href="/v1/verdicts/{_e(f.contract)}/{_e(f.job_id)}">report</a> · '
        f'<a href="/jobs/{_e(names.get(f.contract, f.contract))}/{_e(f.job_id)}">job</a></li>'
        for f in view.failures
    )
    return f'<h3>Not verified, newest first</h3><ul class="failures">{items}</ul>'


def render_pictures(view: Overview | None, names: Mapping[str, str], range_name: str) -> str:
    """Every picture section; ``names`` maps contract addresses to configured names."""
    picker = _range_picker(range_name)
    if view is None:
        return f'{picker}<p class="empty">Nothing indexed yet: no pictures to draw.</p>'
    keeper = _bars(
        "keeper-actions", f"Keeper actions finished, last {view.range_name}", view, view.keeper,
        _OUTCOME_PATTERNS, {},
    )  # fmt: skip
    verification = _bars(
        "verification", f"Evaluator verdicts by verification result, last {view.range_name}",
        view, view.verification, _STATUS_PATTERNS, _STATUS_LABELS,
    )  # fmt: skip
    moment = datetime.fromtimestamp(view.now, UTC).strftime("%Y-%m-%d %H:%M:%S")
    as_of = (
        f'<p class="as-of">Pictures as of block <strong id="pictures-block">{view.block}</strong>'
        f" ({_e(moment)} UTC, chain time).</p>"
    )
    return (
        f"{charts.pattern_defs()}{picker}{as_of}"
        f'<section id="pictures-locked"><h2>Escrow locked over time</h2>'
        f"{_locked(view, names)}</section>"
        f'<div class="cards"><section class="card" id="pictures-keeper"><h2>Keeper actions</h2>'
        f"{keeper}</section>"
        f'<section class="card" id="pictures-deadlines"><h2>Deadlines ahead</h2>'
        f"{_deadlines(view, names)}</section></div>"
        f'<section id="pictures-verification"><h2>Verification</h2>'
        f'<div class="cards"><div class="card">{verification}</div>'
        f'<div class="card">{_failures(view, names)}</div></div></section>'
    )
