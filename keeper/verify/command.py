"""``keeper verify``: check one job's verdict straight from an RPC endpoint, or its stored history.

``--from-index`` takes the same facts from the daemon's database instead.
Standalone mode needs no daemon and no database: it reads the job's
``JobCompleted``/``JobRejected`` event and the last ``JobSubmitted`` before it
with ``eth_getLogs`` (filtered by topic0 and the jobId topic), and ``getJob``
at the verdict's block, then runs the same verifier as the daemon and prints
the report. ``--json`` prints the report's canonical bytes, so two runs over
the same chain data and documents print the same bytes. With
``[verdicts.github]`` configured, GitHubEval verdicts are re-run against
GitHub's API exactly as the daemon does (the verdict's block time decides
what "changed since the verdict" means).

Exit codes: 0 verified, 1 failed (mismatch, invalid document, evaluator
disagrees), 3 undetermined (unavailable, not reproducible, no verdict or
chain unreachable), 2 usage or configuration error. The RPC URL never appears
in output: it may carry an API key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from keeper.config import load_config
from keeper.domain.event_catalog import spec_for
from keeper.domain.model import Log
from keeper.domain.ranges import RangePolicy
from keeper.domain.views import decode_view, encode_view
from keeper.errors import ConfigError, KeeperError
from keeper.rpc.client import RpcClient
from keeper.rpc.config import EndpointConfig
from keeper.rpc.scan import scan_logs
from keeper.store import verifications as store
from keeper.store.db import connect, is_url
from keeper.verify.checks import CheckConfig, VerdictFacts
from keeper.verify.configured import build_verifier
from keeper.verify.failures import exit_code
from keeper.verify.report import ChainRef, Report, stored_report, validate_history
from keeper.verify.sources import Source
from keeper.verify.verdict import Outcome, Verdict, Verifier, verify_verdict
from keeper.verify.verifier import verdict_from_index

EXIT_USAGE = 2
EXIT_UNDETERMINED = 3


JOB_COMPLETED = spec_for("JobCompleted").topic0
JOB_REJECTED = spec_for("JobRejected").topic0
JOB_SUBMITTED = spec_for("JobSubmitted").topic0
_EVENT_NAMES = {JOB_COMPLETED: "JobCompleted", JOB_REJECTED: "JobRejected"}
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}\Z")


class VerdictNotFound(Exception):
    """The contract has no JobCompleted/JobRejected event for this job (yet)."""


async def _logs(
    rpc: RpcClient, contract: str, from_block: int, to_block: int, topics: list[Any]
) -> list[Log]:
    """Every matching log in the range, with the adaptive range public endpoints need."""
    found: list[Log] = []
    policy = RangePolicy(size=10_000, minimum=1, maximum=100_000)
    async for _, _, chunk in scan_logs(
        rpc, [contract], from_block, to_block, policy, topics=topics
    ):
        found.extend(chunk)
    return found


async def read_verdict(
    rpc: RpcClient, contract: str, job_id: int, chain_id: int, from_block: int = 0
) -> Verdict:
    """The chain's side of a verdict: the event, the last submission before it, and getJob."""
    contract = contract.lower()
    job_topic = "0x" + f"{job_id:064x}"
    head = await rpc.block_number()
    logs = await _logs(rpc, contract, from_block, head, [[JOB_COMPLETED, JOB_REJECTED], job_topic])
    if not logs:
        raise VerdictNotFound(f"no JobCompleted/JobRejected event for job {job_id}")
    event = logs[-1]
    submissions = await _logs(
        rpc, contract, from_block, event.block_number, [JOB_SUBMITTED, job_topic]
    )
    before = [
        s
        for s in submissions
        if (s.block_number, s.log_index) < (event.block_number, event.log_index)
    ]
    deliverable = "0x" + before[-1].data[:32].hex() if before else None
    job = decode_view(
        "getJob", await rpc.call(contract, encode_view("getJob", str(job_id)), event.block_number)
    )
    reason = "0x" + event.data[:32].hex()
    block = await rpc.get_block(event.block_number, must_exist=True)
    facts = VerdictFacts(
        job_id=job_id,
        event_name=_EVENT_NAMES[event.topics[0]],
        reason=reason,
        deliverable=deliverable,
        evaluator=str(job["evaluator"]),
        description=str(job["description"]),
        block_time=block.timestamp if block is not None else None,
    )
    chain = ChainRef(
        chain_id=chain_id,
        contract=contract,
        job_id=job_id,
        event=facts.event_name,
        tx_hash=event.tx_hash,
        block_hash=event.block_hash,
        block_number=event.block_number,
        log_index=event.log_index,
        reason=reason,
        deliverable=deliverable,
        evaluator=facts.evaluator,
    )
    return Verdict(chain, facts)


async def verify_standalone(
    rpc_url: str,
    contract: str,
    job_id: int,
    sources: Sequence[Source],
    content_sources: Sequence[Source],
    chain_id: int | None = None,
    *,
    checks: CheckConfig | None = None,
    from_block: int = 0,
) -> Report:
    """Verify one job's verdict from an RPC endpoint alone; returns the report."""
    verifier = Verifier(sources, content_sources, checks or CheckConfig())
    outcome = await standalone_outcome(rpc_url, contract, job_id, verifier, chain_id, from_block)
    return outcome.report


async def standalone_outcome(
    rpc_url: str,
    contract: str,
    job_id: int,
    verifier: Verifier,
    chain_id: int | None = None,
    from_block: int = 0,
) -> Outcome:
    """``verify_standalone`` with the failure details the command prints."""
    async with RpcClient([EndpointConfig.from_url(rpc_url, name="rpc0")]) as rpc:
        node_chain = await rpc.chain_id()
        if chain_id is not None and node_chain != chain_id:
            raise ConfigError(f"the RPC endpoint serves chain {node_chain}, not {chain_id}")
        verdict = await read_verdict(rpc, contract, job_id, node_chain, from_block)
    return await verify_verdict(verdict, verifier)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keeper verify", description="Verify a job's verdict without trusting the evaluator."
    )
    parser.add_argument("--config", required=True, help="keeper TOML configuration")
    parser.add_argument("--contract", required=True, help="escrow contract address")
    parser.add_argument("--id", required=True, type=int, dest="job_id", help="job id")
    parser.add_argument("--json", action="store_true", help="print the report's canonical JSON")
    parser.add_argument("--history", action="store_true", help="check the stored report chain")
    parser.add_argument(
        "--from-index", action="store_true", help="read the verdict from the database, not RPC"
    )
    parser.add_argument("--rpc-url", help="RPC endpoint (default: the config's first)")
    parser.add_argument("--from-block", type=int, default=0, help="first block to search")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run ``keeper verify``; returns the exit code."""
    out = out or sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else 0
    if not _ADDRESS.match(args.contract) or args.job_id < 0:
        print("error: --contract must be a 0x address and --id a job number", file=sys.stderr)
        return EXIT_USAGE
    verifier: Verifier | None = None
    try:
        config = load_config(args.config)
        if args.history:
            return _history(config.database.target, config.chain.chain_id, args, out)
        if args.from_index:
            item = _from_index(config.database.target, config.chain.chain_id, args)
            conn = connect(config.database.target, readonly=True)
            try:  # documents posted to the daemon's API first, as the daemon does
                verifier = build_verifier(config.verdicts, conn=conn)
                outcome = asyncio.run(verify_verdict(item, verifier))
            finally:
                conn.close()
            _print_outcome(outcome, args.json, out)
            return exit_code(outcome.status)
        verifier = build_verifier(config.verdicts)
        rpc_url = args.rpc_url or (config.chain.rpc_urls[0] if config.chain.rpc_urls else "")
        if not rpc_url:
            raise ConfigError("no RPC endpoint: set chain.rpc_urls or pass --rpc-url")
        outcome = asyncio.run(
            standalone_outcome(
                rpc_url,
                args.contract.lower(),
                args.job_id,
                verifier,
                config.chain.chain_id,
                args.from_block,
            )
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except VerdictNotFound as exc:
        print(f"undetermined: {exc}", file=sys.stderr)
        return EXIT_UNDETERMINED
    except (TimeoutError, OSError, ValueError, aiohttp.ClientError, KeeperError) as exc:
        # transport messages may quote the endpoint URL; name the kind of failure only
        print(f"undetermined: cannot read the chain ({type(exc).__name__})", file=sys.stderr)
        return EXIT_UNDETERMINED
    finally:
        if verifier is not None and verifier.sandbox is not None:
            verifier.sandbox.close()
    _print_outcome(outcome, args.json, out)
    return exit_code(outcome.status)


def _print_outcome(outcome: Outcome, as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(outcome.report.canonical.decode("utf-8") + "\n")
        return
    chain = outcome.report.body["chain"]
    assert isinstance(chain, dict)
    out.write(
        f"job {chain['jobId']} at {chain['contract']} ({chain['event']}, tx {chain['txHash']})\n"
    )
    out.write(f"status: {outcome.status.value}\n")
    for failure in outcome.failures:
        out.write(f"  {failure.code.value} at {failure.pointer or '(root)'}: {failure.detail}\n")
    out.write(f"document digest: {outcome.document_digest or '-'}\n")
    out.write(f"report digest: {outcome.report.digest}\n")


def _from_index(db_path: str, chain_id: int, args: argparse.Namespace) -> Verdict:
    if not is_url(db_path) and not Path(db_path).exists():
        raise ConfigError(f"database {db_path} does not exist")
    conn = connect(db_path, readonly=True)
    try:
        row = store.indexed_verdict(conn, chain_id, args.contract.lower(), str(args.job_id))
    finally:
        conn.close()
    if row is None:
        raise VerdictNotFound(f"no indexed JobCompleted/JobRejected for job {args.job_id}")
    return verdict_from_index(row)


def _history(db_path: str, chain_id: int, args: argparse.Namespace, out: TextIO) -> int:
    """Print and check a verdict's stored report chain: 0 valid, 1 broken, 3 none stored."""
    if not is_url(db_path) and not Path(db_path).exists():
        raise ConfigError(f"database {db_path} does not exist")
    conn = connect(db_path, readonly=True)
    try:
        entries = store.history(conn, chain_id, args.contract.lower(), str(args.job_id))
    finally:
        conn.close()
    if not entries:
        print("undetermined: no verification stored for this job", file=sys.stderr)
        return EXIT_UNDETERMINED
    reports = [stored_report(e.report_json, e.report_digest) for e in entries]
    problems = validate_history(reports)
    if args.json:
        out.write(
            json.dumps([r.body | {"digest": r.digest} for r in reports], sort_keys=True) + "\n"
        )
    else:
        for report in reports:
            out.write(f"revision {report.revision_count}: {report.status.value} {report.digest}\n")
        out.write("history: " + ("valid" if not problems else "; ".join(problems)) + "\n")
    return 0 if not problems else 1


__all__ = [
    "VerdictNotFound",
    "main",
    "read_verdict",
    "standalone_outcome",
    "verify_standalone",
]
