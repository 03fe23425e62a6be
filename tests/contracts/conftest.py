"""One deployment per test module on a module-scoped anvil; every test runs inside an
evm_snapshot that is reverted afterwards, so tests are independent and fast."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from escrow_harness import Chain

from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import deploy_all


@pytest.fixture(scope="module")
def deployed(module_anvil: AnvilProcess) -> Chain:
    return Chain(module_anvil.url, deploy_all(module_anvil.url))


@pytest.fixture
def c(deployed: Chain) -> Iterator[Chain]:
    snap = deployed.control.snapshot()
    try:
        yield deployed
    finally:
        deployed.control.revert(snap)
