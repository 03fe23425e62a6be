"""Just enough of a PromQL parser to check dashboards and alert rules against live data.

Two questions are asked of every expression: which metric names does it read,
and which sub-expressions must return data for it to be wired correctly. An
alert such as ``rate(x[5m]) > 0.2`` is legitimately empty while all is well, so
its comparison filter is stripped and ``rate(x[5m])`` must have data instead.
The right side of ``and``/``unless`` is a filter (it may be empty), each side
of ``or`` is an alternative (each must be wired). A regex over the text would
confuse ``!=`` in a label matcher, a ``>`` in a string, or an ``offset 5m``
with these operators; a small recursive-descent parser does not.

Grammar covered: numbers, strings, vector selectors with matchers, range and
subquery brackets, ``offset``/``@`` modifiers, function calls, aggregations with
``by``/``without`` before or after the arguments, unary minus, parentheses, and
every binary operator with PromQL's precedence and ``bool``/``on``/``ignoring``/
``group_left``/``group_right`` modifiers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "Node",
    "PromqlSyntaxError",
    "data_sources",
    "grafana_expand",
    "metric_names",
    "parse",
    "strip_filters",
]

AGGREGATIONS = frozenset(
    {
        "sum",
        "avg",
        "min",
        "max",
        "count",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
    }
)
COMPARISONS = frozenset({"==", "!=", ">", "<", ">=", "<="})
# Binding power, PromQL's order: or < and/unless < comparisons < +,- < *,/,%,atan2 < ^.
PRECEDENCE: Mapping[str, int] = {
    "or": 1,
    "and": 2,
    "unless": 2,
    **dict.fromkeys(COMPARISONS, 3),
    "+": 4,
    "-": 4,
    "*": 5,
    "/": 5,
    "%": 5,
    "atan2": 5,
    "^": 6,
}
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
    |(?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
    |(?P<duration>(?:\d+(?:ms|s|m|h|d|w|y))+(?![\w.]))
    |(?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
    |(?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=(){}\[\],:@])
    """,
    re.VERBOSE,
)
_GROUP_SIDES = frozenset({"group_left", "group_right"})
# Grafana's built-in interval variables, with values that suit a short test window.
GRAFANA_BUILTINS: Mapping[str, str] = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "5m",
}


class PromqlSyntaxError(ValueError):
    """The expression is outside the subset this parser understands, or invalid."""


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    start: int
    end: int


@dataclass
class Node:
    """A parsed sub-expression: ``kind`` plus its character span in the source.

    ``children`` are the sub-expressions inside that span, in order; rendering
    copies the source between them verbatim, so untouched parts keep their text.
    """

    kind: str
    start: int
    end: int
    children: list[Node] = field(default_factory=list)
    op: str = ""
    bool_modifier: bool = False
    name: str = ""


def tokenize(expr: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise PromqlSyntaxError(f"unexpected character {expr[pos]!r} at {pos} in {expr!r}")
        kind = m.lastgroup or ""
        if kind != "ws":
            text = m.group()
            if kind == "ident" and text.lower() in {"inf", "nan"}:
                kind = "number"
            tokens.append(Token(kind, text, m.start(), m.end()))
        pos = m.end()
    return tokens


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.tokens = tokenize(expr)
        self.i = 0

    # --- token helpers -------------------------------------------------------------

    def peek(self, offset: int = 0) -> Token | None:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else None

    def next(self) -> Token:
        tok = self.peek()
        if tok is None:
            raise PromqlSyntaxError(f"unexpected end of {self.expr!r}")
        self.i += 1
        return tok

    def expect(self, text: str) -> Token:
        tok = self.next()
        if tok.text != text:
            raise PromqlSyntaxError(f"expected {text!r} at {tok.start}, got {tok.text!r}")
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.text == text

    def skip_balanced(self, open_: str, close: str) -> Token:
        """Consume from ``open_`` to its matching ``close``; return the closing token."""
        self.expect(open_)
        depth = 1
        while True:
            tok = self.next()
            if tok.text == open_ and tok.kind == "op":
                depth += 1
            elif tok.text == close and tok.kind == "op":
                depth -= 1
                if depth == 0:
                    return tok

    # --- grammar -------------------------------------------------------------------

    def parse(self) -> Node:
        node = self.expression(0)
        if self.peek() is not None:
            tok = self.next()
            raise PromqlSyntaxError(f"unexpected {tok.text!r} at {tok.start} in {self.expr!r}")
        return node

    def binary_op(self) -> str | None:
        tok = self.peek()
        if tok is None:
            return None
        text = tok.text.lower() if tok.kind == "ident" else tok.text
        if tok.kind in {"op", "ident"} and text in PRECEDENCE:
            return text
        return None

    def expression(self, min_power: int) -> Node:
        lhs = self.unary()
        while (op := self.binary_op()) is not None and PRECEDENCE[op] >= min_power:
            self.next()
            bool_modifier = self.modifiers()
            # ^ is right-associative; everything else left-associative
            power = PRECEDENCE[op] if op == "^" else PRECEDENCE[op] + 1
            rhs = self.expression(power)
            lhs = Node("binary", lhs.start, rhs.end, [lhs, rhs], op=op, bool_modifier=bool_modifier)
        return lhs

    def modifiers(self) -> bool:
        """Consume ``bool``, ``on(..)``/``ignoring(..)``, ``group_left(..)``; report ``bool``."""
        bool_modifier = False
        tok = self.peek()
        if tok is not None and tok.kind == "ident" and tok.text.lower() == "bool":
            self.next()
            bool_modifier = True
        tok = self.peek()
        if tok is not None and tok.kind == "ident" and tok.text.lower() in {"on", "ignoring"}:
            self.next()
            self.skip_balanced("(", ")")
        tok = self.peek()
        if tok is not None and tok.kind == "ident" and tok.text.lower() in _GROUP_SIDES:
            self.next()
            if self.at("("):
                self.skip_balanced("(", ")")
        return bool_modifier

    def unary(self) -> Node:
        tok = self.peek()
        if tok is not None and tok.kind == "op" and tok.text in {"-", "+"}:
            self.next()
            operand = self.expression(PRECEDENCE["^"])
            return Node("unary", tok.start, operand.end, [operand], op=tok.text)
        return self.postfix(self.primary())

    def primary(self) -> Node:
        tok = self.next()
        if tok.kind == "number":
            return Node("number", tok.start, tok.end)
        if tok.kind == "string":
            return Node("string", tok.start, tok.end)
        if tok.text == "(":
            inner = self.expression(0)
            close = self.expect(")")
            return Node("paren", tok.start, close.end, [inner])
        if tok.text == "{":
            self.i -= 1
            close = self.skip_balanced("{", "}")
            return Node("selector", tok.start, close.end)
        if tok.kind != "ident":
            raise PromqlSyntaxError(f"unexpected {tok.text!r} at {tok.start} in {self.expr!r}")
        word = tok.text
        if word.lower() in AGGREGATIONS and (self.at("(") or self.grouping_next()):
            return self.aggregation(tok)
        if self.at("("):
            return self.call(tok)
        end = tok.end
        if self.at("{"):
            end = self.skip_balanced("{", "}").end
        return Node("selector", tok.start, end, name=word)

    def grouping_next(self) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == "ident" and tok.text.lower() in {"by", "without"}

    def aggregation(self, tok: Token) -> Node:
        if self.grouping_next():
            self.next()
            self.skip_balanced("(", ")")
        args, close = self.arguments()
        end = close.end
        if self.grouping_next():
            self.next()
            end = self.skip_balanced("(", ")").end
        return Node("aggregation", tok.start, end, args, name=tok.text)

    def call(self, tok: Token) -> Node:
        args, close = self.arguments()
        return Node("call", tok.start, close.end, args, name=tok.text)

    def arguments(self) -> tuple[list[Node], Token]:
        self.expect("(")
        args: list[Node] = []
        if not self.at(")"):
            args.append(self.expression(0))
            while self.at(","):
                self.next()
                args.append(self.expression(0))
        return args, self.expect(")")

    def postfix(self, node: Node) -> Node:
        """Range/subquery brackets and ``offset``/``@`` modifiers extend the node's span."""
        while True:
            tok = self.peek()
            if tok is None:
                return node
            if tok.text == "[":
                node.end = self.skip_balanced("[", "]").end
            elif tok.kind == "ident" and tok.text.lower() == "offset":
                self.next()
                if self.at("-"):
                    self.next()
                node.end = self.next().end
            elif tok.text == "@":
                self.next()
                last = self.next()
                if self.at("("):
                    last = self.skip_balanced("(", ")")
                node.end = last.end
            else:
                return node


def parse(expr: str) -> Node:
    """Parse ``expr`` into a :class:`Node` tree (raises :class:`PromqlSyntaxError`)."""
    return _Parser(expr).parse()


def _render(expr: str, node: Node, child_text: list[str]) -> str:
    out = []
    pos = node.start
    for child, text in zip(node.children, child_text, strict=True):
        out.append(expr[pos : child.start])
        out.append(text)
        pos = child.end
    out.append(expr[pos : node.end])
    return "".join(out)


def _is_literal(node: Node) -> bool:
    if node.kind == "number":
        return True
    if node.kind in {"unary", "paren"}:
        return _is_literal(node.children[0])
    return False


def _is_filter(node: Node) -> bool:
    return node.kind == "binary" and node.op in COMPARISONS and not node.bool_modifier


def _strip(expr: str, node: Node) -> str:
    if _is_filter(node):
        lhs, rhs = node.children
        # a filter keeps the left side's samples; with a literal on the left it keeps the right
        kept = rhs if _is_literal(lhs) else lhs
        return _strip(expr, kept)
    if node.kind == "binary" and node.op in {"and", "unless"}:
        return _strip(expr, node.children[0])
    return _render(expr, node, [_strip(expr, c) for c in node.children])


def strip_filters(expr: str) -> str:
    """``expr`` with every comparison filter and ``and``/``unless`` filter removed."""
    return _strip(expr, parse(expr))


def _sources(expr: str, node: Node) -> list[str]:
    if node.kind == "paren":
        return _sources(expr, node.children[0])
    if node.kind == "binary" and node.op == "or":
        return _sources(expr, node.children[0]) + _sources(expr, node.children[1])
    if node.kind == "binary" and node.op in {"and", "unless"}:
        return _sources(expr, node.children[0])
    if _is_filter(node):
        lhs, rhs = node.children
        sides = [side for side in (lhs, rhs) if not _is_literal(side)]
        return [s for side in sides for s in _sources(expr, side)]
    return [_strip(expr, node)]


def data_sources(expr: str) -> list[str]:
    """The sub-expressions that must return data for ``expr`` to be wired to real series.

    Comparison filters are stripped (both sides are sources when neither is a
    literal); ``or`` contributes both alternatives; ``and``/``unless`` only
    their left side. An expression without filters is its own single source.
    """
    return _sources(expr, parse(expr))


def _selectors(node: Node) -> list[Node]:
    if node.kind == "selector":
        return [node]
    return [s for c in node.children for s in _selectors(c)]


def metric_names(expr: str) -> set[str]:
    """Metric names read by ``expr`` (selectors written with a name)."""
    return {n.name for n in _selectors(parse(expr)) if n.name}


_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def grafana_expand(expr: str, variables: Mapping[str, str]) -> str:
    """Replace Grafana variables (``$x``, ``${x}``, ``${x:fmt}``, ``[[x]]``) with values.

    Built-in interval variables get test-sized defaults; an unknown variable is
    an error, since Grafana would leave it in and Prometheus would reject it.
    """
    values = {**GRAFANA_BUILTINS, **variables}

    def replace(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in values:
            raise KeyError(f"undefined Grafana variable ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(replace, expr)
