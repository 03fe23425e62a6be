"""Shared fixtures: a real anvil node per test (or per module), always reaped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from keeper.devnet.anvil import AnvilProcess, ChainControl


@pytest.fixture
def anvil() -> Iterator[AnvilProcess]:
    with AnvilProcess() as node:
        yield node


@pytest.fixture
def chain(anvil: AnvilProcess) -> ChainControl:
    return ChainControl(anvil.url)


@pytest.fixture(scope="module")
def module_anvil() -> Iterator[AnvilProcess]:
    with AnvilProcess() as node:
        yield node
