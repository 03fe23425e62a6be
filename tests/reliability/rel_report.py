"""The reliability report: figures gathered by the suite, written as JSON and Markdown.

One process-wide :data:`REPORT` collects what each test measured, per size
("fast" inside ``make test``, "long" under ``make reliability``), and is
rewritten after every contribution so a run cut short still leaves the figures
it earned. The files go to ``$RELIABILITY_REPORT_DIR`` (default: the working
directory, where they are gitignored).

Under pytest-xdist (``make test`` runs two workers) each worker has its own
collector: it writes its part beside the report, named by the run's id, and the
report is made from every part of that run, so the last worker to flush leaves
the whole run's figures.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["REPORT", "Figures", "Report", "report_dir"]

JSON_NAME = "reliability-report.json"
MD_NAME = "reliability-report.md"


@dataclass
class Figures:
    """Everything the issue asks the report to show, for one suite size."""

    crash_kills_total: int = 0
    crash_kills_survived: int = 0
    crash_recoveries_measured: int = 0
    crash_worst_recovery_seconds: float | None = None
    reorgs_total: int = 0
    reorgs_survived: int = 0
    reorgs_removing_keeper_txs: int = 0
    reorgs_removing_verdicts: int = 0
    deep_reorg_halts_clean: int = 0
    faults_injected: Counter[str] = field(default_factory=Counter)
    fuzz_cases: Counter[str] = field(default_factory=Counter)
    fuzz_rejections: Counter[str] = field(default_factory=Counter)
    keeper_txs_audited: int = 0
    duplicate_sends: int = 0
    wasted_sends: int = 0  # failed before taking effect (e.g. a reorg moved a deadline back)
    double_executions: int = 0
    lost_events: int = 0
    extra_events: int = 0
    stale_open_intents: int = 0
    silent_endings: int = 0  # tasks ended with no event, as the daemon's keeper saw them
    secret_leaks: int = 0
    secret_bytes_scanned: int = 0
    checks_failed: list[str] = field(default_factory=list)
    wasted: list[str] = field(default_factory=list)  # each wasted send, as the audit saw it

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("faults_injected", "fuzz_cases", "fuzz_rejections"):
            out[key] = dict(sorted(getattr(self, key).items()))
        return out


class Report:
    """Thread-safe collector; ``flush`` writes both files from the current figures."""

    def __init__(self) -> None:
        self.sizes: dict[str, Figures] = {}
        self._lock = threading.Lock()
        self.started = time.time()

    def figures(self, size: str) -> Figures:
        with self._lock:
            return self.sizes.setdefault(size, Figures())

    def recovery(self, size: str, seconds: float) -> None:
        """One measured restart-to-ready time; the report keeps the count and the worst."""
        fig = self.figures(size)
        with self._lock:
            fig.crash_recoveries_measured += 1
            worst = fig.crash_worst_recovery_seconds
            fig.crash_worst_recovery_seconds = round(
                seconds if worst is None else max(worst, seconds), 3
            )

    def as_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "generated_at": int(time.time()),
                "duration_seconds": round(time.time() - self.started, 1),
                "sizes": {k: v.as_json() for k, v in sorted(self.sizes.items())},
            }

    def flush(self, directory: Path | None = None) -> Path | None:
        """Write the JSON and Markdown files; nothing is written before any figure exists."""
        if not self.sizes:
            return None
        target = directory or report_dir()
        target.mkdir(parents=True, exist_ok=True)
        data = self.as_json()
        run, worker = (
            os.environ.get("PYTEST_XDIST_TESTRUNUID"),
            os.environ.get("PYTEST_XDIST_WORKER"),
        )
        if run and worker:
            _write(target / f".{JSON_NAME}.{run}.{worker}", json.dumps(data))
            for old in target.glob(f".{JSON_NAME}.*"):
                if not old.name.startswith(f".{JSON_NAME}.{run}."):
                    old.unlink(missing_ok=True)  # a part of an earlier run
            parts = sorted(target.glob(f".{JSON_NAME}.{run}.*"))
            data = merged([json.loads(p.read_text()) for p in parts])
        _write(target / JSON_NAME, json.dumps(data, indent=2, sort_keys=True) + "\n")
        _write(target / MD_NAME, markdown(data))
        return target


def _write(path: Path, text: str) -> None:
    """Whole or not at all: another worker may be reading it."""
    part = path.with_name(f".tmp-{os.getpid()}-{path.name}")  # outside the parts' glob
    part.write_text(text)
    os.replace(part, path)


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One report of several workers' (their ``as_json``): counts added, the worst
    recovery the worst of all, failed checks listed together."""
    sizes: dict[str, dict[str, Any]] = {}
    for part in parts:
        for size, figures in part["sizes"].items():
            into = sizes.setdefault(size, Figures().as_json())
            for key, value in figures.items():
                have = into[key]
                if key == "crash_worst_recovery_seconds":
                    into[key] = (
                        value if have is None else have if value is None else max(have, value)
                    )
                elif isinstance(value, dict):
                    into[key] = {k: have.get(k, 0) + value.get(k, 0)
                                 for k in sorted({*have, *value})}  # fmt: skip
                else:
                    into[key] = have + value
    return {
        "generated_at": max((p["generated_at"] for p in parts), default=int(time.time())),
        "duration_seconds": max((p["duration_seconds"] for p in parts), default=0.0),
        "sizes": dict(sorted(sizes.items())),
    }


def report_dir() -> Path:
    return Path(os.environ.get("RELIABILITY_REPORT_DIR") or Path.cwd())


def _ratio(done: int, total: int) -> str:
    return f"{done} / {total}" if total else "not run"


def markdown(data: dict[str, Any]) -> str:
    """A short human summary of ``data`` (the JSON report), one table per size."""
    lines = ["# Reliability report", ""]
    for size, f in data["sizes"].items():
        worst = f["crash_worst_recovery_seconds"]
        faults = ", ".join(f"{k} {v}" for k, v in f["faults_injected"].items()) or "none"
        fuzz = ", ".join(f"{k} {v}" for k, v in f["fuzz_cases"].items()) or "none"
        rows = [
            ("crash kills survived", _ratio(f["crash_kills_survived"], f["crash_kills_total"])),
            ("worst recovery (restart to ready)", "n/a" if worst is None else f"{worst:.2f} s"),
            ("reorgs survived", _ratio(f["reorgs_survived"], f["reorgs_total"])),
            ("reorgs removing keeper txs / verdicts",
             f"{f['reorgs_removing_keeper_txs']} / {f['reorgs_removing_verdicts']}"),
            ("deeper-than-window reorgs halted cleanly", str(f["deep_reorg_halts_clean"])),
            ("injected faults", faults),
            ("fuzz cases", fuzz),
            ("keeper transactions audited", str(f["keeper_txs_audited"])),
            ("duplicate sends (mined after the action took effect)", str(f["duplicate_sends"])),
            ("sends failed before the action took effect, then retried", str(f["wasted_sends"])),
            ("actions executed twice", str(f["double_executions"])),
            ("keeper intents left open without a send", str(f["stale_open_intents"])),
            ("lost events / extra events", f"{f['lost_events']} / {f['extra_events']}"),
            ("tasks ended with no event, seen by the keeper and checked on chain",
             str(f["silent_endings"])),
            ("secret leaks", f"{f['secret_leaks']} (in {f['secret_bytes_scanned']} bytes)"),
        ]  # fmt: skip
        lines += [f"## {size}", "", "| figure | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in rows]
        if f["checks_failed"]:
            lines += ["", "Failed checks:", *(f"- {c}" for c in f["checks_failed"])]
        if f["wasted"]:
            lines += ["", "Sends failed before the action took effect:",
                      *(f"- {w}" for w in f["wasted"][:WASTED_SHOWN])]  # fmt: skip
            if len(f["wasted"]) > WASTED_SHOWN:
                lines.append(f"- and {len(f['wasted']) - WASTED_SHOWN} more")
        lines.append("")
    return "\n".join(lines)


WASTED_SHOWN = 30

REPORT = Report()
