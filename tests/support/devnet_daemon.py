"""A daemon in the test's own event loop, configured as ``keeper devnet`` configures it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from keeper.compose import load
from keeper.daemon import Daemon
from keeper.devnet.anvil import DEV_KEYS, free_port
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.devnet.runner import KEEPER_KEY_ENV, render_config
from keeper.devnet.traffic import Roles, address_of

__all__ = ["devnet_daemon"]


async def devnet_daemon(
    rpc_url: str,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    deployment: Deployment | None = None,
) -> Daemon:
    """The devnet's contracts deployed on ``rpc_url`` (or ``deployment``, already there) and
    a daemon over them, not started.

    The devnet's own config (its keeper key from the environment, as there), with an
    evaluator service nobody listens on: no job exists, so no verdict is fetched.
    """
    monkeypatch.setenv(KEEPER_KEY_ENV, DEV_KEYS[4])
    if deployment is None:
        deployment = await asyncio.to_thread(deploy_all, rpc_url)
    config = workdir / "keeper.toml"
    config.write_text(
        render_config(
            rpc_url=rpc_url,
            deployment=deployment,
            evaluator_url="http://127.0.0.1:9",
            workdir=workdir,
            evaluator_address=address_of(Roles().evaluator),
            api_listen=f"127.0.0.1:{free_port()}",
        )
    )
    return Daemon(load(str(config)))
