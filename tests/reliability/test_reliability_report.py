"""The report writer: what it records, where it writes, and what the summary says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rel_checks import current_test
from rel_report import JSON_NAME, MD_NAME, WASTED_SHOWN, Report, report_dir


class TestReport:
    def test_nothing_is_written_before_any_figure(self, tmp_path: Path) -> None:
        """A session that ran no reliability test leaves no report behind."""
        assert Report().flush(tmp_path) is None
        assert list(tmp_path.iterdir()) == []

    def test_recovery_keeps_the_worst_and_the_count(self) -> None:
        """Recovery times are reduced to how many were measured and the slowest one."""
        report = Report()
        for seconds in (1.25, 3.5, 0.75):
            report.recovery("fast", seconds)
        fig = report.figures("fast")
        assert fig.crash_recoveries_measured == 3
        assert fig.crash_worst_recovery_seconds == 3.5

    def test_json_and_markdown_carry_the_figures_per_size(self, tmp_path: Path) -> None:
        """Both files show each size's kills, reorgs, faults, fuzz cases and leak counts."""
        report = Report()
        fast = report.figures("fast")
        fast.crash_kills_total, fast.crash_kills_survived = 20, 19
        fast.faults_injected["flaky"] += 7
        fast.fuzz_cases["config"] += 200
        report.figures("long").reorgs_total = 200
        assert report.flush(tmp_path) == tmp_path
        data = json.loads((tmp_path / JSON_NAME).read_text())
        assert data["sizes"]["fast"]["faults_injected"] == {"flaky": 7}
        assert data["sizes"]["fast"]["fuzz_cases"] == {"config": 200}
        assert data["sizes"]["long"]["reorgs_total"] == 200
        text = (tmp_path / MD_NAME).read_text()
        assert "| crash kills survived | 19 / 20 |" in text
        assert "| reorgs survived | 0 / 200 |" in text
        assert "flaky 7" in text and "config 200" in text
        assert text.index("## fast") < text.index("## long")

    def test_workers_of_one_run_make_one_report(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Two xdist workers each flush their own figures: the report adds them up, keeps
        the worst recovery of both, and leaves out a part an earlier run left behind."""
        (tmp_path / f".{JSON_NAME}.earlier.gw0").write_text(
            json.dumps({"generated_at": 1, "duration_seconds": 1.0,
                        "sizes": {"fast": {"crash_kills_total": 999}}})
        )  # fmt: skip
        monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "now")
        for worker, kills, worst, fault in (("gw0", 20, 0.5, "flaky"), ("gw1", 5, 1.5, "lag")):
            monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
            report = Report()
            fig = report.figures("fast")
            fig.crash_kills_total = fig.crash_kills_survived = kills
            fig.faults_injected[fault] += 2
            fig.faults_injected["error"] += 1
            fig.checks_failed.append(f"seen by {worker}")
            report.recovery("fast", worst)
            report.flush(tmp_path)
        fast = json.loads((tmp_path / JSON_NAME).read_text())["sizes"]["fast"]
        assert (fast["crash_kills_total"], fast["crash_kills_survived"]) == (25, 25)
        assert fast["crash_worst_recovery_seconds"] == 1.5
        assert fast["crash_recoveries_measured"] == 2
        assert fast["faults_injected"] == {"error": 2, "flaky": 2, "lag": 2}
        assert fast["checks_failed"] == ["seen by gw0", "seen by gw1"]
        assert "| crash kills survived | 25 / 25 |" in (tmp_path / MD_NAME).read_text()
        assert not (tmp_path / f".{JSON_NAME}.earlier.gw0").exists()

    def test_failed_checks_are_listed(self, tmp_path: Path) -> None:
        """A failed check recorded by a torture shows up under its size."""
        report = Report()
        report.figures("long").checks_failed.append("tables differ from a fresh backfill")
        report.flush(tmp_path)
        assert "- tables differ from a fresh backfill" in (tmp_path / MD_NAME).read_text()

    def test_wasted_sends_are_listed_up_to_a_bound(self, tmp_path: Path) -> None:
        """Each wasted send is named under its size, the first WASTED_SHOWN of them."""
        report = Report()
        wasted = [f"claimRefund {n} at block {n}, in a batch, worked, no effect" for n in range(40)]
        report.figures("long").wasted += wasted
        report.flush(tmp_path)
        text = (tmp_path / MD_NAME).read_text()
        assert f"- {wasted[WASTED_SHOWN - 1]}\n" in text
        assert f"- {wasted[WASTED_SHOWN]}\n" not in text
        assert f"- and {40 - WASTED_SHOWN} more" in text

    def test_a_wasted_send_names_the_torture_that_made_it(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Each line of the list ends with the running test, parameters included."""
        assert current_test() == "test_a_wasted_send_names_the_torture_that_made_it"
        monkeypatch.setenv(
            "PYTEST_CURRENT_TEST", "tests/reliability/test_x.py::test_reorgs[long] (call)"
        )
        assert current_test() == "test_reorgs[long]"
        monkeypatch.delenv("PYTEST_CURRENT_TEST")
        assert current_test() == "outside pytest"

    def test_directory_comes_from_the_environment(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """RELIABILITY_REPORT_DIR moves the report; without it the working directory is used."""
        monkeypatch.setenv("RELIABILITY_REPORT_DIR", str(tmp_path / "out"))
        assert report_dir() == tmp_path / "out"
        monkeypatch.delenv("RELIABILITY_REPORT_DIR")
        monkeypatch.chdir(tmp_path)
        assert report_dir() == tmp_path
