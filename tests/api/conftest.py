"""Fixtures for API tests: one known database per module and a real aiohttp server on it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from api_support import build_app
from api_world import World, build_world
from jsonschema import Draft202012Validator


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("api") / "keeper.db")


@pytest.fixture(scope="session")
def openapi() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        resources.files("keeper.api").joinpath("openapi.json").read_text("utf-8")
    )
    return doc


@pytest.fixture(scope="session")
def validate(openapi: dict[str, Any]) -> Callable[[str, Any], None]:
    """Validate a body against a named component schema of the served OpenAPI document."""

    def check(schema_name: str, body: Any) -> None:
        schema = {
            "$ref": f"#/components/schemas/{schema_name}",
            "components": openapi["components"],
        }
        Draft202012Validator(schema).validate(body)

    return check


@pytest.fixture(params=[False, True], ids=["pool", "inline"])
async def client(
    world: World, request: pytest.FixtureRequest
) -> AsyncIterator[TestClient[Any, Any]]:
    """Every route, with lookups on the thread pool and inline (the daemon's ApiThread)."""
    async with TestClient(TestServer(build_app(world, inline_lookups=request.param))) as c:
        yield c


@pytest.fixture
def tmp_db(tmp_path: Path) -> Path:
    return tmp_path / "keeper.db"
