"""`keeper devnet`: a chain, our contracts, an evaluator stand-in, traffic, and the daemon.

Everything started here is stopped here: cancelling ``run_devnet`` (Ctrl-C) or the
daemon coroutine returning stops the traffic after its current step, the HTTP service,
and the anvil process group, in that order.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog

from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.devnet.evaluator_service import EvaluatorService, VerdictBook, load_fixtures
from keeper.devnet.traffic import KEEPER_KEY, Roles, Timing, TrafficGenerator, address_of

__all__ = ["KEEPER_KEY_ENV", "DaemonFn", "render_config", "run_devnet"]

log = structlog.get_logger()

KEEPER_KEY_ENV = "KEEPER_PRIVATE_KEY"
CONFIG_NAME = "keeper.toml"
DEPLOYMENT_NAME = "deployment.json"
DATABASE_NAME = "keeper.db"

DaemonFn = Callable[[Path], Awaitable[object]]


def _toml_str(value: str) -> str:
    # a TOML basic string is a JSON string for everything we write (paths, URLs, hex)
    return json.dumps(value)


def render_config(
    *,
    rpc_url: str,
    deployment: Deployment,
    evaluator_url: str,
    workdir: Path,
    evaluator_address: str,
    api_listen: str = "127.0.0.1:9464",
) -> str:
    """The daemon's TOML config for this devnet (pure: same inputs, same text).

    The verdict source uses ``{contract}`` because job ids restart at 1 on each escrow.
    """
    jobs_url = f"{evaluator_url}/v1/contracts/{{contract}}/jobs/{{jobId}}"
    content_url = f"{evaluator_url}/v1/content/{{hash}}"
    lines = [
        "# Written by `keeper devnet` for its own anvil; regenerated on every start.",
        "[chain]",
        f"chain_id = {deployment.chain_id}",
        f"rpc_urls = [{_toml_str(rpc_url)}]",
        'finality = "confirmations"',
        "confirmations = 2",
        "poll_interval = 0.5",
        "",
        "[database]",
        f"path = {_toml_str(str(workdir / DATABASE_NAME))}",
    ]
    for name, protocol, address in deployment.escrows():
        lines += [
            "",
            "[[contracts]]",
            f"name = {_toml_str(name)}",
            f"protocol = {_toml_str(protocol.value)}",
            f"address = {_toml_str(address)}",
            f"start_block = {deployment.start_block}",
        ]
    lines += [
        "",
        "[verdicts]",
        f'sources = [ {{ kind = "http", url = {_toml_str(jobs_url)}, pointer = "/verdict" }} ]',
        f'content_sources = [ {{ kind = "http", url = {_toml_str(content_url)} }} ]',
        "",
        "[verdicts.evaluators]",
        f"SchemaEval = {_toml_str(evaluator_address.lower())}",
        "",
        "[keeper]",
        "enabled = true",
        f"private_key_env = {_toml_str(KEEPER_KEY_ENV)}",
        f"multicall = {_toml_str(deployment.multicall)}",
        "",
        "[api]",
        f"listen = {_toml_str(api_listen)}",
        "",
    ]
    return "\n".join(lines)


async def run_devnet(
    *,
    rpc_url: str | None,
    workdir: Path,
    with_daemon: DaemonFn | None,
    self_keep: bool | None = None,
    timing: Timing | None = None,
    api_listen: str = "127.0.0.1:9464",
) -> None:
    """Run the devnet until cancelled, or until ``with_daemon(config_path)`` returns.

    ``self_keep`` (default: no daemon given) lets the traffic generator perform the
    keeper's transactions itself once due. The keeper key of the devnet (a public anvil
    dev key) is put in ``$KEEPER_PRIVATE_KEY`` unless that is already set.
    """
    anvil: AnvilProcess | None = None
    service: EvaluatorService | None = None
    tasks: list[asyncio.Task[object]] = []
    try:
        if rpc_url is None:
            # started inline (well under a second): a cancellation cannot then land between
            # spawning the process and recording it, which would orphan the node
            anvil = AnvilProcess().start()
            rpc_url = anvil.url
            # a fresh node is a new chain: an index of the last one (same chain id) would
            # not match it, and the daemon would rightly halt on a "deep reorg"
            await asyncio.to_thread(_forget_old_index, workdir)
        deployment = await asyncio.to_thread(deploy_all, rpc_url)
        book = VerdictBook(deployment.commerce)
        service = EvaluatorService(book)
        evaluator_url = await service.start()
        roles = Roles()
        config_text = render_config(
            rpc_url=rpc_url,
            deployment=deployment,
            evaluator_url=evaluator_url,
            workdir=workdir,
            evaluator_address=address_of(roles.evaluator),
            api_listen=api_listen,
        )
        config_path = await asyncio.to_thread(_write_files, workdir, deployment, config_text)
        os.environ.setdefault(KEEPER_KEY_ENV, KEEPER_KEY)
        log.info(
            "devnet.started",
            chain_id=deployment.chain_id,
            config=str(config_path),
            evaluator_service=evaluator_url,
            start_block=deployment.start_block,
        )
        traffic = TrafficGenerator(
            rpc_url,
            deployment,
            book,
            load_fixtures(),
            self_keep=with_daemon is None if self_keep is None else self_keep,
            timing=timing,
            roles=roles,
        )
        tasks.append(asyncio.create_task(traffic.run(), name="devnet-traffic"))
        if with_daemon is not None:
            tasks.append(asyncio.create_task(_call(with_daemon, config_path), name="devnet-daemon"))
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # a crash in either half ends the devnet with its exception
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if service is not None:
            await service.stop()
        if anvil is not None:
            anvil.stop()
        log.info("devnet.stopped")


def _forget_old_index(workdir: Path) -> None:
    """Delete the daemon database a previous devnet run left in ``workdir``."""
    for suffix in ("", "-wal", "-shm"):
        old = workdir / f"{DATABASE_NAME}{suffix}"
        if old.exists():
            old.unlink()
            log.info("devnet.old_index_removed", path=str(old))


def _write_files(workdir: Path, deployment: Deployment, config_text: str) -> Path:
    """Write the daemon config and the deployment record; return the config path."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / DEPLOYMENT_NAME).write_text(
        json.dumps(deployment.as_dict(), indent=2, sort_keys=True) + "\n"
    )
    config_path = workdir / CONFIG_NAME
    config_path.write_text(config_text)
    return config_path


async def _call(daemon: DaemonFn, config_path: Path) -> object:
    return await daemon(config_path)
