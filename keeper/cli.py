"""Command-line entry point (``keeper``).

Exit codes are one contract across commands: 0 ok, 1 a failure was found,
2 usage or configuration error, 3 undetermined (e.g. a verdict source is
unavailable). Subcommand modules are imported lazily so ``keeper --help``
stays fast and a broken optional part cannot break the others.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable, Sequence

from keeper import __version__
from keeper.errors import ConfigError, FatalError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNDETERMINED = 3


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        "-c",
        required=True,
        metavar="FILE",
        help="the TOML configuration file (every key overridable by KEEPER_<SECTION>__<KEY>)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keeper",
        description="Indexer, verdict verifier and keeper for ERC-8183 and ERC-8195 escrows.",
        epilog="exit codes: 0 ok, 1 failure found, 2 usage/config error, 3 undetermined",
    )
    parser.add_argument("--version", action="version", version=f"keeper {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "run",
        help="run the daemon: index, verify, keep, serve",
        description="Index the configured escrows, verify verdicts, send keeper transactions "
        "and serve /healthz, /readyz, /metrics, /v1/... and the status page until SIGTERM or "
        "SIGINT; then finish or persist in-flight work and exit 0.",
    )
    _add_config(p)

    p = sub.add_parser(
        "backfill", help="index up to the finalized block (or --to-block), then exit"
    )
    _add_config(p)
    p.add_argument("--to-block", type=int, metavar="N", help="stop after block N")
    p.add_argument("--no-progress", action="store_true", help="do not draw a progress line")

    # ``keeper verify`` has its own parser (keeper.verify.command); listed here for --help
    sub.add_parser("verify", help="verify one verdict and print its report", add_help=False)

    p = sub.add_parser("status", help="print sync and keeper status from the database")
    _add_config(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")

    db = sub.add_parser("db", help="database maintenance")
    dbsub = db.add_subparsers(dest="db_command", metavar="DB_COMMAND")
    p = dbsub.add_parser("rebuild", help="recompute all projections from stored events")
    _add_config(p)
    p = dbsub.add_parser("migrate", help="apply pending schema migrations")
    _add_config(p)
    p = dbsub.add_parser(
        "backup",
        help="copy the database to a file, safely while the daemon runs",
        description="Take a consistent snapshot with SQLite's online backup (the daemon keeps "
        "writing), check its integrity, then move it to --to atomically.",
    )
    _add_config(p)
    p.add_argument("--to", required=True, metavar="PATH", help="the backup file to write")

    cfg = sub.add_parser("config", help="configuration tools")
    cfgsub = cfg.add_subparsers(dest="config_command", metavar="CONFIG_COMMAND")
    p = cfgsub.add_parser("check", help="validate a file and print the effective config, redacted")
    _add_config(p)

    p = sub.add_parser("devnet", help="start anvil, deploy, generate traffic and run the daemon")
    p.add_argument("--rpc", metavar="URL", help="use this node instead of starting anvil")
    p.add_argument("--workdir", default=".devnet", help="where the config and database go")
    p.add_argument("--no-daemon", action="store_true", help="only the chain and its traffic")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument(
        "--api-listen",
        default="127.0.0.1:9464",
        metavar="HOST:PORT",
        help="where the daemon serves its API (a free port is taken if this one is busy)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["verify"]:
        from keeper.verify.command import main as verify_main

        return verify_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "run": _run,
        "backfill": _backfill,
        "status": _status,
        "db": _db,
        "config": _config,
        "devnet": _devnet,
    }
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return handlers[args.command](args)
    except ConfigError as exc:
        print(f"keeper: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FatalError as exc:
        print(f"keeper: fatal: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`keeper config check | head`): not a failure of ours;
        # point stdout at /dev/null so the interpreter's final flush stays quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


def _exit_quietly(signum: int, frame: object) -> None:
    """SIGTERM before the daemon's own handler is installed: nothing is in flight yet."""
    raise SystemExit(EXIT_OK)


def _run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _exit_quietly)
    from keeper.daemon import run_daemon

    return asyncio.run(run_daemon(args.config))


def _backfill(args: argparse.Namespace) -> int:
    from keeper import app

    return asyncio.run(
        app.run_backfill(args.config, to_block=args.to_block, progress=not args.no_progress)
    )


def _status(args: argparse.Namespace) -> int:
    from keeper import app

    return app.run_status(args.config, as_json=args.json)


def _db(args: argparse.Namespace) -> int:
    from keeper import app

    if args.db_command == "rebuild":
        return app.run_db_rebuild(args.config)
    if args.db_command == "migrate":
        return app.run_db_migrate(args.config)
    if args.db_command == "backup":
        return app.run_db_backup(args.config, args.to)
    print("keeper db: choose rebuild, migrate or backup", file=sys.stderr)
    return EXIT_USAGE


def _config(args: argparse.Namespace) -> int:
    from keeper import app

    if args.config_command == "check":
        return app.run_config_check(args.config)
    print("keeper config: choose check", file=sys.stderr)
    return EXIT_USAGE


def _devnet(args: argparse.Namespace) -> int:
    from keeper.devnet_command import run_devnet_command

    return asyncio.run(run_devnet_command(args))


if __name__ == "__main__":
    sys.exit(main())
