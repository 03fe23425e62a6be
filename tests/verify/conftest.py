"""A real local HTTP evaluator service on 127.0.0.1 for the verify tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from evaluator_server import EvaluatorServer


@pytest.fixture
async def evaluator() -> AsyncIterator[EvaluatorServer]:
    server = EvaluatorServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def other_host() -> AsyncIterator[EvaluatorServer]:
    server = EvaluatorServer()
    await server.start()
    yield server
    await server.stop()
