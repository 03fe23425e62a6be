"""scripts/build-contracts: committed artifacts are fresh, and --check catches drift."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from keeper.devnet.contracts import ARTIFACT_NAMES, load_artifact

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path("scripts") / "build-contracts"


def run_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / SCRIPT), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_committed_artifacts_are_fresh() -> None:
    """Recompiling the committed sources reproduces the committed files byte for byte."""
    result = run_check(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_check_lists_stale_missing_and_extra_files(tmp_path: Path) -> None:
    """In a copy of the tree, --check exits 1 naming a changed, a deleted and a stray file."""
    for rel in ("contracts", "abi", "keeper/devnet/artifacts"):
        shutil.copytree(ROOT / rel, tmp_path / rel)
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / SCRIPT, tmp_path / SCRIPT)
    (tmp_path / "node_modules").symlink_to(ROOT / "node_modules")
    (tmp_path / "abi" / "MockUSDC.json").write_text("[]\n")
    (tmp_path / "keeper/devnet/artifacts/Multicall3.json").unlink()
    (tmp_path / "abi" / "Old.json").write_text("[]\n")
    result = run_check(tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "stale: abi/MockUSDC.json",
        "missing: keeper/devnet/artifacts/Multicall3.json",
        "extra: abi/Old.json",
    ]


def test_artifacts_load_with_abi_and_bytecode() -> None:
    """Every shipped artifact loads as package data with an ABI equal to abi/<Name>.json."""
    for name in ARTIFACT_NAMES:
        abi, bytecode = load_artifact(name)
        assert abi == json.loads((ROOT / "abi" / f"{name}.json").read_text())
        assert bytecode.startswith("0x") and len(bytecode) > 100
        bytes.fromhex(bytecode[2:])  # well-formed hex, no unlinked library placeholders
    abi, _ = load_artifact("MockUSDC")
    abi.clear()  # callers get their own copy
    assert load_artifact("MockUSDC")[0]
