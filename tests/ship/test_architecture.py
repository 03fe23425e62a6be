"""The rooms of docs/architecture.md hold in the code: no import cycles, no import across a rule.

Every module under keeper/ is parsed with ``ast`` (nothing is imported), and the
allowed imports are read from the rooms table in docs/architecture.md, so the doc
is the one statement of the rules. Imports under ``if TYPE_CHECKING:`` are left out;
imports inside functions are checked like module-level ones, for layering and for
cycles, but reported apart, because at module level no cycle is tolerated at all.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
TABLE_MARKER = "<!-- rooms:"
PACKAGE = "keeper"

# Rules that hold only once the other branches of issue #15 are merged: (importer room,
# imported room) -> why it is still there. Empty it as they land; a stale entry fails
# ``test_known_exceptions_are_still_needed``, so the list cannot outlive its reason.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True, slots=True)
class Import:
    importer: str
    imported: str
    line: int
    in_function: bool

    def __str__(self) -> str:
        where = "in a function" if self.in_function else "at module level"
        return f"{self.importer} -> {self.imported} (line {self.line}, {where})"


def module_files(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under ``root/package``."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: resolve against the importing module's package
        anchor = module.split(".")
        anchor = anchor if is_package else anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def imports_of(modules: Mapping[str, Path]) -> list[Import]:
    """Every import of one package module by another, with where it happens.

    ``from a.b import c`` counts as importing ``a.b.c`` when that is a module, else
    ``a.b``; importing ``a.b.c`` also runs the ``a`` and ``a.b`` packages' __init__,
    which counts as importing them unless the importer is inside them already.
    """
    found: list[Import] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        _visit(tree, name, path.name == "__init__.py", modules, False, found)
    return found


def _visit(
    node: ast.AST,
    importer: str,
    is_package: bool,
    modules: Mapping[str, Path],
    in_function: bool,
    found: list[Import],
) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for rest in child.orelse:
                _visit(rest, importer, is_package, modules, in_function, found)
            continue
        inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        if isinstance(child, ast.Import | ast.ImportFrom):
            targets = {t for t in _targets(child, importer, is_package) if t in modules}
            if isinstance(child, ast.ImportFrom) and len(targets) > 1:
                targets.discard(child.module or "")  # the imported names are modules
            for target in sorted(targets):
                for imported in (*_parents(target, importer, modules), target):
                    if imported != importer:
                        found.append(Import(importer, imported, child.lineno, inner))
        _visit(child, importer, is_package, modules, inner, found)


def _parents(target: str, importer: str, modules: Mapping[str, Path]) -> list[str]:
    parts = target.split(".")
    out = []
    for n in range(1, len(parts)):
        parent = ".".join(parts[:n])
        if parent in modules and not (importer + ".").startswith(parent + "."):
            out.append(parent)
    return out


@dataclass(frozen=True, slots=True)
class Room:
    name: str
    paths: tuple[str, ...]  # "keeper/x/" (a package) or "keeper/x.py" (a module)
    may_import: frozenset[str]


def rooms_from_doc(text: str) -> dict[str, Room]:
    """The rooms table that follows the marker comment in docs/architecture.md."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(TABLE_MARKER))
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    header, _rule, *body = rows
    assert header == ["room", "modules", "job", "may import"], header
    rooms: dict[str, Room] = {}
    for name, paths, _job, allowed in body:
        assert name not in rooms, f"room {name} listed twice"
        may = frozenset() if allowed == "—" else frozenset(a.strip() for a in allowed.split(","))
        rooms[name] = Room(name, tuple(re.findall(r"`([^`]+)`", paths)), may)
    return rooms


def room_of(module: str, path: Path, rooms: Mapping[str, Room], root: Path) -> str | None:
    if module == PACKAGE:
        return PACKAGE
    rel = path.relative_to(root).as_posix()
    for room in rooms.values():
        for p in room.paths:
            if (p.endswith("/") and rel.startswith(p)) or rel == p:
                return room.name
    return None


def layering_violations(
    imports: Iterable[Import], rooms: Mapping[str, Room], room_by_module: Mapping[str, str]
) -> list[tuple[tuple[str, str], Import]]:
    """Imports of a room its row does not allow (the package root is open to all)."""
    out = []
    for imp in imports:
        src, dst = room_by_module[imp.importer], room_by_module[imp.imported]
        if src == dst or dst == PACKAGE:
            continue
        if src == PACKAGE or dst not in rooms[src].may_import:
            out.append(((src, dst), imp))
    return out


def cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan, iterative)."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(graph[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


@pytest.fixture(scope="module")
def code() -> tuple[dict[str, Room], dict[str, str], list[Import], list[str]]:
    rooms = rooms_from_doc(DOC.read_text())
    modules = module_files(ROOT)
    room_by_module: dict[str, str] = {}
    homeless = []
    for name, path in modules.items():
        room = room_of(name, path, rooms, ROOT)
        if room is None:
            homeless.append(name)
        else:
            room_by_module[name] = room
    return rooms, room_by_module, imports_of(modules), homeless


Code = tuple[dict[str, Room], dict[str, str], list[Import], list[str]]


class TestRooms:
    def test_every_module_is_in_a_room(self, code: Code) -> None:
        """A new module or package must get a row (or join one) in docs/architecture.md."""
        *_, homeless = code
        assert not homeless, "modules in no room of docs/architecture.md: " + ", ".join(homeless)

    def test_the_rules_are_layered(self, code: Code) -> None:
        """The table names only its own rooms and allows no loop between rooms."""
        rooms, *_ = code
        for room in rooms.values():
            assert room.may_import <= set(rooms), (room.name, room.may_import - set(rooms))
            assert room.name not in room.may_import, room.name
        allowed = [(r.name, other) for r in rooms.values() for other in r.may_import]
        assert cycles(allowed) == []

    def test_every_import_follows_the_rules(self, code: Code) -> None:
        """Module-level and function-level imports alike stay within their room's row."""
        rooms, room_by_module, imports, _ = code
        new = [
            str(imp)
            for pair, imp in layering_violations(imports, rooms, room_by_module)
            if pair not in KNOWN_EXCEPTIONS
        ]
        assert not new, "imports that break docs/architecture.md:\n" + "\n".join(new)

    def test_known_exceptions_are_still_needed(self, code: Code) -> None:
        """Each known exception still occurs; once fixed it must leave KNOWN_EXCEPTIONS."""
        rooms, room_by_module, imports, _ = code
        seen = {pair for pair, _ in layering_violations(imports, rooms, room_by_module)}
        assert sorted(set(KNOWN_EXCEPTIONS) - seen) == []


class TestCycles:
    def test_no_cycle_at_module_level(self, code: Code) -> None:
        """Importing any module first works: no loop of module-level imports, no exception."""
        _, _, imports, _ = code
        edges = [(i.importer, i.imported) for i in imports if not i.in_function]
        assert cycles(edges) == []

    def test_no_cycle_counting_function_level_imports(self, code: Code) -> None:
        """A function-level import may not close a loop either (bar the known exceptions)."""
        _, room_by_module, imports, _ = code
        edges = [
            (i.importer, i.imported)
            for i in imports
            if (room_by_module[i.importer], room_by_module[i.imported]) not in KNOWN_EXCEPTIONS
        ]
        assert cycles(edges) == []


class TestTheChecker:
    """The checks above can fail: a small package with a cycle and a broken rule trips them."""

    def _package(self, tmp_path: Path) -> tuple[dict[str, Room], dict[str, str], list[Import]]:
        files = {
            "keeper/__init__.py": "",
            "keeper/domain/__init__.py": "",
            "keeper/domain/a.py": "from keeper.domain import b\n",
            "keeper/domain/b.py": "def f():\n    from keeper.domain.a import x\n",
            "keeper/domain/c.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from keeper.store import db\n"
                "from keeper.store.db import connect\n"
            ),
            "keeper/store/__init__.py": "from keeper.store.db import connect\n",
            "keeper/store/db.py": "from keeper.domain import c\nfrom . import rows\n",
            "keeper/store/rows.py": "",
        }
        for rel, text in files.items():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text)
        doc = (
            f"{TABLE_MARKER} -->\n| room | modules | job | may import |\n|-|-|-|-|\n"
            "| domain | `keeper/domain/` | core | — |\n| store | `keeper/store/` | db | domain |\n"
        )
        rooms = rooms_from_doc(doc)
        modules = module_files(tmp_path)
        by_module = {n: room_of(n, p, rooms, tmp_path) or "?" for n, p in modules.items()}
        return rooms, by_module, imports_of(modules)

    def test_finds_the_violation_and_the_cycles(self, tmp_path: Path) -> None:
        rooms, by_module, imports = self._package(tmp_path)
        broken = layering_violations(imports, rooms, by_module)
        # domain.c -> store.db, and -> the store package its __init__ runs; not TYPE_CHECKING
        assert sorted((pair, i.importer, i.imported, i.line) for pair, i in broken) == [
            (("domain", "store"), "keeper.domain.c", "keeper.store", 4),
            (("domain", "store"), "keeper.domain.c", "keeper.store.db", 4),
        ]
        top = [(i.importer, i.imported) for i in imports if not i.in_function]
        every = [(i.importer, i.imported) for i in imports]
        assert cycles(top) == [["keeper.domain.c", "keeper.store", "keeper.store.db"]]
        assert ["keeper.domain.a", "keeper.domain.b"] in cycles(every)
        assert ("keeper.store.db", "keeper.store.rows") in top  # relative import resolved
