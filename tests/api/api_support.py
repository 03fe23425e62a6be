"""Helpers shared by the API tests: building the app on a test world."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web
from api_world import CHAIN_ID, CONTRACTS, PROTOCOLS, World
from prometheus_client import CollectorRegistry

from keeper.api.app import make_app
from keeper.api.health import Check
from keeper.obs.metrics import Metrics

LIVE: dict[str, Any] = {"chain_id": CHAIN_ID, "head_block": 0, "halt_reason": None}


def build_app(
    world: World,
    *,
    readiness: Any = None,
    verification: Any = None,
    verdicts: Any = None,
    submit_verdict: Any = None,
    live: Mapping[str, Any] | None = None,
    inline_lookups: bool = False,
) -> web.Application:
    registry = CollectorRegistry()
    Metrics(registry, version="test")
    live_view = dict(live or LIVE)
    return make_app(
        world.path,
        registry,
        lambda: live_view,
        readiness=readiness,
        contracts=CONTRACTS,
        protocols=PROTOCOLS,
        chain_id=CHAIN_ID,
        verification=verification,
        verdicts=verdicts,
        submit_verdict=submit_verdict,
        inline_lookups=inline_lookups,
    )


def failing_readiness() -> dict[str, Check]:
    return {"rpc": Check(True, "ok"), "indexing": Check(False, "halted: deep reorg")}
