"""Load the compiled contracts shipped as package data.

The artifacts are built by ``scripts/build-contracts`` and committed, so a wheel install
can deploy the devnet without node or solc.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["ARTIFACT_NAMES", "load_abi", "load_artifact", "taskmarket_abi"]

ARTIFACT_NAMES: tuple[str, ...] = (
    "AgenticCommerce",
    "BulkJobDriver",
    "ERC8183",
    "ERC8183EventEmitter",
    "EventEmitter",
    "LegacyAgenticCommerce",
    "LegacyTaskMarket",
    "MockUSDC",
    "MonolithicTaskMarket",
    "Multicall3",
    "SwitchableHook",
    "TaskMarket",
    "TaskMarketCoreFacet",
    "TaskMarketEvaluatorFacet",
    "TaskMarketForwarder",
    "TaskMarketViewFacet",
    "UpgradeableProxy",
)

Abi = list[dict[str, Any]]


@cache
def _read(name: str) -> tuple[str, str]:
    if name not in ARTIFACT_NAMES:
        raise KeyError(f"unknown contract artifact: {name!r}")
    ref = resources.files("keeper.devnet").joinpath("artifacts", f"{name}.json")
    data = json.loads(ref.read_text(encoding="utf-8"))
    # re-serialised so every caller gets a fresh, unshared ABI object
    return json.dumps(data["abi"]), str(data["bytecode"])


def load_artifact(name: str) -> tuple[Abi, str]:
    """Return (abi, 0x-prefixed creation bytecode) of contract ``name``."""
    abi_text, bytecode = _read(name)
    abi: Abi = json.loads(abi_text)
    return abi, bytecode


def load_abi(name: str) -> Abi:
    """Return the ABI of contract ``name``."""
    return load_artifact(name)[0]


def taskmarket_abi() -> Abi:
    """The task market diamond as callers see it: its own functions plus every facet's.

    The facets share their events and errors (one base contract), so each appears once.
    """
    out: Abi = []
    seen: set[str] = set()
    for name in ("TaskMarket", "TaskMarketCoreFacet", "TaskMarketEvaluatorFacet",
                 "TaskMarketViewFacet"):  # fmt: skip
        for item in load_abi(name):
            if item.get("type") == "constructor":
                continue
            key = json.dumps(item, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append(item)
    return out
