"""The sync's room: what ``keeper/sync`` may import, and the composition root without cycles.

Read from the source (every import statement, lazy ones inside functions
too), so a forbidden import fails here before it becomes a habit.
"""

from __future__ import annotations

import ast
from pathlib import Path

import keeper

ROOT = Path(keeper.__file__).parent
# the design's table: sync may use rpc and domain (plus logging, the error types and, for the
# fetch process, the runtime settings every long-running process makes)
SYNC_MAY_IMPORT = (
    "keeper.sync",
    "keeper.rpc",
    "keeper.domain",
    "keeper.obs",
    "keeper.errors",
    "keeper.process_tuning",
    "keeper.waiting",
)


def imports_of(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            out.add(node.module)
            # ``from keeper import app`` names a module too
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in out if name == "keeper" or name.startswith("keeper.")}


def names(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_sync_imports_only_rpc_domain_obs_and_errors() -> None:
    files = sorted((ROOT / "sync").glob("*.py"))
    assert len(files) >= 5  # indexer, changes, view calls, tokens, __init__
    found = {
        f"{path.name}: {module}"
        for path in files
        for module in imports_of(path)
        if module != "keeper" and not names(module, SYNC_MAY_IMPORT)
        # ``from keeper.domain import x`` also yields "keeper.domain.x": still domain
    }
    assert found == set()


def test_the_sync_sees_the_store_only_through_a_read_view() -> None:
    """The view the sync declares reads and never writes; the store has every member of it.

    (That IndexStore satisfies it by type is checked by mypy --strict, where
    ``keeper.indexing`` hands the store to the Indexer.)
    """
    from keeper.store.index_store import IndexStore
    from keeper.sync.changes import IndexView

    members = {n for n in vars(IndexView) if not n.startswith("_")}
    assert members == {"cursor", "window", "reads_from", "event_blocks", "stamp_checks"}
    assert all(callable(getattr(IndexStore, n, None)) for n in members)


def test_the_commands_and_the_daemon_do_not_import_each_other_or_the_devnet() -> None:
    app = imports_of(ROOT / "app.py")
    daemon = imports_of(ROOT / "daemon.py")
    compose = imports_of(ROOT / "compose.py") | imports_of(ROOT / "indexing.py")
    assert not names_any(app, ("keeper.daemon", "keeper.devnet"))
    assert not names_any(daemon, ("keeper.app", "keeper.devnet"))
    assert not names_any(compose, ("keeper.app", "keeper.daemon", "keeper.devnet"))
    assert "keeper.compose" in app and "keeper.compose" in daemon


def names_any(modules: set[str], prefixes: tuple[str, ...]) -> bool:
    return any(names(m, prefixes) for m in modules)
