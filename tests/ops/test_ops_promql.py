"""The PromQL helper that decides what a dashboard or alert must find in Prometheus."""

from __future__ import annotations

import pytest
from ops_promql import (
    PromqlSyntaxError,
    data_sources,
    grafana_expand,
    metric_names,
    parse,
    strip_filters,
)


class TestMetricNames:
    @pytest.mark.parametrize(
        ("expr", "names"),
        [
            ("keeper_head_block", {"keeper_head_block"}),
            ('rate(a_total{x!="y", z=~"a|b"}[5m])', {"a_total"}),
            ("sum by (le) (rate(h_bucket[1m]))", {"h_bucket"}),
            ("sum(rate(a[5m])) by (job) / on(job) group_left(v) b", {"a", "b"}),
            ('x{name=">"} > bool 1 unless y offset 30m', {"x", "y"}),
            ("vector(0) or time()", set()),
            ('{__name__="a"}', set()),
            ("max_over_time(g[1h:1m]) @ end()", {"g"}),
            ("histogram_quantile(0.9, sum by (m, le) (rate(d_bucket[5m])))", {"d_bucket"}),
            ("-a ^ 2 + Inf * NaN", {"a"}),
        ],
    )
    def test_names_read(self, expr: str, names: set[str]) -> None:
        """Only selector names count: not functions, aggregations, labels or keywords."""
        assert metric_names(expr) == names


class TestStripFilters:
    @pytest.mark.parametrize(
        ("expr", "stripped"),
        [
            ("a > 0", "a"),
            ("0 < a", "a"),
            ("a < -1", "a"),
            ("a > (1)", "a"),
            ("sum by (i) (rate(a[5m])) > 0.2", "sum by (i) (rate(a[5m]))"),
            ("count(a > 0)", "count(a)"),
            ("a > 1 and b == 0", "a"),
            ("a unless b offset 30m", "a"),
            ("a > 0 or b", "a or b"),
            ("a > bool 0", "a > bool 0"),
            ("a / b > 0.2", "a / b"),
            ("a > b", "a"),
            ('a{x!="1"} - b{y=~"z"}', 'a{x!="1"} - b{y=~"z"}'),
        ],
    )
    def test_filters_removed(self, expr: str, stripped: str) -> None:
        """Comparison and set filters go; arithmetic and bool comparisons stay."""
        assert strip_filters(expr) == stripped

    def test_untouched_text_is_kept_verbatim(self) -> None:
        """Spacing and modifiers outside the removed operator survive byte for byte."""
        expr = "sum  by (a)(rate(x[5m]  offset 1m))  /  ignoring(b) group_left  y"
        assert strip_filters(expr) == expr


class TestDataSources:
    @pytest.mark.parametrize(
        ("expr", "sources"),
        [
            ("a", ["a"]),
            ("a == 1", ["a"]),
            ("a > 0 or (b unless b offset 30m)", ["a", "b"]),
            ("(a - b) > 10 and changes(c[10m]) == 0", ["a - b"]),
            ("a < b", ["a", "b"]),
            ("max(a) < 2e16 and max(max_over_time(a[1d])) > 0", ["max(a)"]),
            ("sum(x) or vector(0)", ["sum(x)", "vector(0)"]),
            ("a / b", ["a / b"]),
        ],
    )
    def test_sources(self, expr: str, sources: list[str]) -> None:
        """Alternatives of `or` are each sources; `and`/`unless` right sides are only filters."""
        assert data_sources(expr) == sources


class TestParseErrors:
    @pytest.mark.parametrize("expr", ["sum(", "a >", "rate(a[5m]", "a b", "a # b"])
    def test_rejects(self, expr: str) -> None:
        """Malformed input raises instead of being half understood."""
        with pytest.raises(PromqlSyntaxError):
            parse(expr)


class TestGrafanaExpand:
    def test_variables_and_builtins(self) -> None:
        """Every spelling of a variable is replaced; interval built-ins get durations."""
        expr = 'rate(x{i=~"$instance", j=~"${instance:regex}", k="[[c]]"}[$__rate_interval])'
        out = grafana_expand(expr, {"instance": ".*", "c": "v"})
        assert out == 'rate(x{i=~".*", j=~".*", k="v"}[1m])'

    def test_unknown_variable(self) -> None:
        """A variable the dashboard does not define is reported, not passed to Prometheus."""
        with pytest.raises(KeyError, match="nope"):
            grafana_expand("x{a=~'$nope'}", {})
