"""Server-rendered HTML: the status page and the job/task detail pages.

No JavaScript and no build step: the page must work in any browser an
operator has, through a proxy, in a screenshot. Every value from the database
or the chain is escaped, because descriptions and verdict reasons are
attacker-controlled text.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from string import Template
from typing import Any

from keeper.api.pictures import amount_text
from keeper.store.tokens import TokenMeta

__all__ = ["render_not_found", "render_status", "render_subject"]

_TEMPLATE = Template(resources.files("keeper.api").joinpath("page.html").read_text("utf-8"))


def _e(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return html.escape("" if value is None else str(value), quote=True)


def _page(title: str, body: str) -> str:
    return _TEMPLATE.substitute(title=_e(title), body=body)


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], empty: str) -> str:
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _lookup_form(contracts: Mapping[str, str], message: str = "") -> str:
    options = "".join(f'<option value="{_e(n)}">{_e(n)}</option>' for n in sorted(contracts))
    note = f'<p class="warn" id="lookup-message">{_e(message)}</p>' if message else ""
    return (
        "<section><h2>Look up a job or task</h2>"
        '<form method="get" action="/lookup" id="lookup">'
        f'<label>Contract <select name="contract">{options}</select></label> '
        '<label>Job or task id <input name="id" required placeholder="7 or 0x…"></label> '
        f'<button type="submit">Look up</button></form>{note}</section>'
    )


def render_status(
    live: Mapping[str, Any],
    db: Mapping[str, Any],
    locked: Sequence[Mapping[str, str]],
    recent: Sequence[Mapping[str, Any]],
    contracts: Mapping[str, str],
    message: str = "",
    pictures: str = "",
    tokens: Mapping[str, TokenMeta] | None = None,
) -> str:
    """The status page: sync state, pictures, escrow totals, backlog, recent verdicts, lookup."""
    metas = tokens or {}
    names = {address: name for name, address in contracts.items()}
    cursor = db.get("cursor") or {}
    halted = live.get("halt_reason")
    banner = f'<p class="halt" id="halted">Indexing halted: {_e(halted)}</p>' if halted else ""
    sync = _table(
        ("chain", "head", "finalized", "indexed", "lag (s)"),
        [
            (
                live.get("chain_id", cursor.get("chain_id")),
                live.get("head_block"),
                live.get("finalized_block", cursor.get("finalized_block")),
                cursor.get("indexed_block"),
                live.get("lag_seconds"),
            )
        ],
        "",
    )
    escrow = _table(
        ("contract", "kind", "token", "locked (base units)", "locked (token units)", "holding",
         "open budgets (unfunded)"),
        [
            (names.get(r["contract"], r["contract"]), r["kind"], r["token"] or "-", r["amount"],
             amount_text(int(r["amount"]), r["token"], metas.get(r["token"])), r["count"],
             r["open_budget"])
            for r in locked
        ],
        "No escrow locked.",
    )  # fmt: skip
    count_rows = [
        (names.get(contract, contract), table, status, n)
        for contract, per in sorted(db.get("counts", {}).items())
        for table, statuses in sorted(per.items())
        for status, n in sorted(statuses.items())
    ]
    counts = _table(("contract", "kind", "status", "count"), count_rows, "Nothing indexed yet.")
    backlog = _table(
        ("action", "due, not confirmed"),
        sorted(db.get("keeper_backlog", {}).items()),
        "No keeper backlog.",
    )
    verdicts = _table(
        ("contract", "job", "verdict", "reason", "verification"),
        [
            (
                names.get(v["contract"], v["contract"]),
                v["job_id"],
                v["verdict_event"],
                v["reason"],
                (v.get("verification") or {}).get("status", "not verified yet"),
            )
            for v in recent
        ],
        "No verdicts yet.",
    )
    body = (
        f"{banner}<section><h2>Sync</h2>{sync}</section>{pictures}"
        f"<section><h2>Escrow locked</h2>{escrow}</section>"
        f"<section><h2>Jobs and tasks</h2>{counts}</section>"
        f"<section><h2>Keeper backlog</h2>{backlog}</section>"
        f"<section><h2>Recent verdicts</h2>{verdicts}</section>"
        f"{_lookup_form(contracts, message)}"
    )
    return _page("status", body)


def render_subject(kind: str, item: Mapping[str, Any], contract_name: str) -> str:
    """A job's or task's fields, events and keeper intents as HTML."""
    subject = item.get("job_id") or item.get("task_id")
    fields = _table(
        ("field", "value"),
        [(k, v) for k, v in item.items() if k not in ("events", "intents", "verification")],
        "",
    )
    events = _table(
        ("block", "log", "event", "tx"),
        [(e["block_number"], e["log_index"], e["name"] or "(unknown)", e["tx_hash"])
         for e in item.get("events", [])],
        "No events.",
    )  # fmt: skip
    intents = _table(
        ("action", "status", "outcome", "tx"),
        [(i["action"], i["status"], i["outcome"], i["tx_hash"]) for i in item.get("intents", [])],
        "No keeper actions.",
    )
    verification = item.get("verification") or {}
    body = (
        f'<section><h2 id="subject">{_e(kind[:-1])} {_e(subject)} on {_e(contract_name)}</h2>'
        f'<p>Status: <strong id="status">{_e(item.get("status"))}</strong> · '
        f"Verification: {_e(verification.get('status', 'not verified yet'))} · "
        f'<a href="/v1/{_e(kind)}/{_e(item.get("contract"))}/{_e(subject)}">JSON</a> · '
        f'<a href="/">back</a></p>{fields}</section>'
        f"<section><h2>Events</h2>{events}</section>"
        f"<section><h2>Keeper actions</h2>{intents}</section>"
    )
    return _page(f"{kind[:-1]} {subject}", body)


def render_not_found(what: str, contracts: Mapping[str, str]) -> str:
    body = f'<p class="warn" id="not-found">{_e(what)}</p>{_lookup_form(contracts)}'
    return _page("not found", body)
