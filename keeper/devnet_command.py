"""``keeper devnet``: a local chain, its traffic and the daemon, for a demo.

Part of the command line, not of the devnet: it joins the devnet and the
daemon, so neither of them imports the other (only the CLI imports it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
from pathlib import Path

from keeper.daemon import run_daemon
from keeper.devnet.runner import run_devnet
from keeper.obs.logging import configure_logging, get_logger

log = get_logger(__name__)


async def run_devnet_command(args: argparse.Namespace) -> int:
    configure_logging("auto", "info", stream=sys.stderr)

    async def daemon(config_path: Path) -> object:
        return await run_daemon(str(config_path))

    workdir = Path(args.workdir)
    coro = run_devnet(
        rpc_url=args.rpc,
        workdir=workdir,
        with_daemon=None if args.no_daemon else daemon,
        api_listen=available_listen(args.api_listen),
    )
    try:
        if args.duration:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(args.duration):
                    await coro
        else:
            await coro
    except asyncio.CancelledError:
        pass
    return 0


def available_listen(listen: str) -> str:
    """``listen`` if its port is free, else the same host on a free port (logged).

    The demo must start on a machine where something already holds the
    default port; a production ``keeper run`` keeps failing loudly instead.
    """
    host, _, port = listen.rpartition(":")
    with socket.socket() as s:
        try:
            s.bind((host, int(port)))
            return listen
        except OSError:
            s.bind((host, 0))
            chosen = f"{host}:{s.getsockname()[1]}"
    log.warning("api_port_busy", wanted=listen, using=chosen)
    return chosen
