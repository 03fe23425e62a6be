"""Alert rules and the compose Prometheus config: valid, complete, and firing when they should.

promtool ships with Debian's ``prometheus`` package (``make test`` installs it);
without it these tests skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ops_assets import ALERTS, PROMETHEUS_CONFIG, dump_yaml, load_rules, load_yaml
from ops_promql import parse

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
UNIT_TESTS = Path(__file__).with_name("alerts_test.yml")
SEVERITIES = {"critical", "warning", "info"}
# Conditions the issue requires an alert for, and the rule that covers each.
REQUIRED = {
    "indexing halted": "IndexingHalted",
    "head lag too high": "HeadLagHigh",
    "overdue actions growing": "OverdueActionsGrowing",
    "verdict mismatch seen": "VerdictMismatch",
    "signer balance low": "SignerBalanceLow",
    "fee cap hit": "FeeCapHit",
    "RPC error rate high": "RpcErrorRateHigh",
    "a hook reverts the refund": "RefundBlockedByHook",
}
RUNBOOK = re.compile(r"^docs/runbook\.md#[a-z0-9]+(?:-[a-z0-9]+)*$")
RUNBOOK_DOC = ALERTS.parents[2] / "docs" / "runbook.md"


def markdown_anchors(text: str) -> set[str]:
    """Anchors a Markdown renderer creates: GitHub heading slugs plus explicit ids."""
    anchors = set(re.findall(r"""<a\s+(?:id|name)=["']([^"']+)["']""", text))
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False
    )


@needs_promtool
class TestPromtool:
    def test_check_rules(self) -> None:
        """`promtool check rules` accepts alerts.yml and counts every rule in it."""
        result = promtool("check", "rules", str(ALERTS))
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"SUCCESS: {len(load_rules())} rules found" in result.stdout

    def test_check_compose_config(self) -> None:
        """The compose prometheus.yml is valid and loads alerts.yml beside it."""
        result = promtool("check", "config", str(PROMETHEUS_CONFIG))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "alerts.yml" in result.stdout

    def test_rule_unit_tests(self) -> None:
        """Each required alert fires on a synthetic series after its `for`, and not before."""
        result = promtool("test", "rules", str(UNIT_TESTS))
        assert result.returncode == 0, result.stdout + result.stderr

    def test_check_rules_has_teeth(self, tmp_path: Path) -> None:
        """Control: a rule with a PromQL syntax error is rejected, so the check is real."""
        bad = tmp_path / "bad.yml"
        bad.write_text(
            dump_yaml({"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "rate(x[5m]"}]}]})
        )
        assert promtool("check", "rules", str(bad)).returncode != 0


class TestRuleShape:
    def test_required_alerts_exist(self) -> None:
        """Every condition named in the issue has its alert."""
        names = {r["alert"] for r in load_rules()}
        assert set(REQUIRED.values()) <= names

    @pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r["alert"])
    def test_rule_metadata(self, rule: dict[str, object]) -> None:
        """Each rule waits (`for`), has a known severity, and carries all three annotations."""
        assert "for" in rule
        labels = rule["labels"]
        assert isinstance(labels, dict) and labels.get("severity") in SEVERITIES
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        assert {"summary", "description", "runbook_url"} <= set(annotations)
        assert RUNBOOK.match(str(annotations["runbook_url"])), annotations["runbook_url"]

    @pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r["alert"])
    def test_expression_parses(self, rule: dict[str, object]) -> None:
        """Our PromQL helper understands every rule (the live test depends on it)."""
        parse(str(rule["expr"]))

    @pytest.mark.skipif(not RUNBOOK_DOC.exists(), reason="docs/runbook.md not written yet")
    def test_runbook_anchors_exist(self) -> None:
        """Every runbook_url lands on a heading (or explicit anchor) of docs/runbook.md."""
        anchors = markdown_anchors(RUNBOOK_DOC.read_text())
        missing = {
            r["alert"]: r["annotations"]["runbook_url"]
            for r in load_rules()
            if r["annotations"]["runbook_url"].split("#", 1)[1] not in anchors
        }
        assert not missing, missing

    def test_markdown_anchors(self) -> None:
        """Heading slugs follow GitHub's rule; explicit anchors count too."""
        text = (
            '# Runbook\n## Indexing halted\n### RPC error rate: high!\n<a id="fee-cap-hit"></a>\n'
        )
        assert markdown_anchors(text) == {
            "runbook",
            "indexing-halted",
            "rpc-error-rate-high",
            "fee-cap-hit",
        }

    def test_unit_tests_cover_required_alerts(self) -> None:
        """The promtool unit tests exercise every required alert at least once firing."""
        doc = load_yaml(UNIT_TESTS)
        fired = {
            case["alertname"]
            for test in doc["tests"]
            for case in test.get("alert_rule_test", [])
            if case.get("exp_alerts")
        }
        assert set(REQUIRED.values()) <= fired
