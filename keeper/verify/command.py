"""``keeper verify``: check one job's verdict straight from an RPC endpoint, or its stored history.

``--from-index`` takes the same facts from the daemon's database instead.
Standalone mode needs no daemon and no database: it reads the job's
``JobCompleted``/``JobRejected`` event and the last ``JobSubmitted`` before it
with ``eth_getLogs`` (filtered by topic0 and the jobId topic), and ``getJob``
at the verdict's block, then runs the same verifier as the daemon and prints
the report. ``--json`` prints the report's canonical bytes, so two runs over
the same chain data and documents print the same bytes.

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
from eth_utils.crypto import keccak
from web3 import AsyncHTTPProvider, AsyncWeb3
from web3.exceptions import Web3Exception

from keeper.config import load_config
from keeper.errors import ConfigError
from keeper.store import verifications as store
from keeper.store.db import connect
from keeper.verify.checks import CheckConfig, VerdictFacts
from keeper.verify.configured import build_verifier
from keeper.verify.failures import exit_code
from keeper.verify.report import ChainRef, Report, stored_report, validate_history
from keeper.verify.sources import Source
from keeper.verify.verifier import (
    Outcome,
    Verdict,
    Verifier,
    verdict_from_index,
    verify_verdict,
)

EXIT_USAGE = 2
EXIT_UNDETERMINED = 3


def _topic(signature: str) -> str:
    return "0x" + bytes(keccak(text=signature)).hex()


JOB_COMPLETED = _topic("JobCompleted(uint256,address,bytes32)")
JOB_REJECTED = _topic("JobRejected(uint256,address,bytes32)")
JOB_SUBMITTED = _topic("JobSubmitted(uint256,address,bytes32)")
_EVENT_NAMES = {JOB_COMPLETED: "JobCompleted", JOB_REJECTED: "JobRejected"}
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")

_ABI_FILE = Path(__file__).resolve().parents[2] / "abi" / "AgenticCommerce.json"
# getJob as in PROTOCOLS.md, for installs without the project's abi/ directory.
_JOB_COMPONENTS = [
    ("id", "uint256"),
    ("client", "address"),
    ("provider", "address"),
    ("evaluator", "address"),
    ("description", "string"),
    ("budget", "uint256"),
    ("expiredAt", "uint256"),
    ("status", "uint8"),
    ("hook", "address"),
    ("paymentToken", "address"),
    ("providerAgentId", "uint256"),
    ("submittedAt", "uint256"),
]
_INLINE_GET_JOB: dict[str, Any] = {
    "type": "function",
    "name": "getJob",
    "stateMutability": "view",
    "inputs": [{"name": "jobId", "type": "uint256"}],
    "outputs": [
        {
            "name": "",
            "type": "tuple",
            "components": [{"name": n, "type": t} for n, t in _JOB_COMPONENTS],
        }
    ],
}


class VerdictNotFound(Exception):
    """The contract has no JobCompleted/JobRejected event for this job (yet)."""


def get_job_abi() -> list[dict[str, Any]]:
    """The getJob entry of the project's ABI file, else the inline one."""
    try:
        entries = json.loads(_ABI_FILE.read_text())
        if isinstance(entries, dict):
            entries = entries.get("abi", [])
        found = [e for e in entries if e.get("type") == "function" and e.get("name") == "getJob"]
        if found:
            return found[:1]
    except (OSError, ValueError):
        pass
    return [_INLINE_GET_JOB]


async def read_verdict(
    w3: AsyncWeb3[Any], contract: str, job_id: int, chain_id: int, from_block: int = 0
) -> Verdict:
    """The chain's side of a verdict: the event, the last submission before it, and getJob."""
    address = AsyncWeb3.to_checksum_address(contract)
    job_topic = "0x" + f"{job_id:064x}"
    logs = await w3.eth.get_logs(
        {
            "address": address,
            "fromBlock": from_block,
            "toBlock": "latest",
            "topics": [[JOB_COMPLETED, JOB_REJECTED], job_topic],
        }
    )
    if not logs:
        raise VerdictNotFound(f"no JobCompleted/JobRejected event for job {job_id}")
    event = logs[-1]
    block_number = int(event["blockNumber"])
    submissions = await w3.eth.get_logs(
        {
            "address": address,
            "fromBlock": from_block,
            "toBlock": block_number,
            "topics": [JOB_SUBMITTED, job_topic],
        }
    )
    before = [
        s
        for s in submissions
        if (int(s["blockNumber"]), int(s["logIndex"])) < (block_number, int(event["logIndex"]))
    ]
    deliverable = "0x" + bytes(before[-1]["data"])[:32].hex() if before else None
    job = await _get_job(w3, address, job_id, block_number)
    reason = "0x" + bytes(event["data"])[:32].hex()
    facts = VerdictFacts(
        job_id=job_id,
        event_name=_EVENT_NAMES["0x" + bytes(event["topics"][0]).hex()],
        reason=reason,
        deliverable=deliverable,
        evaluator=str(job["evaluator"]).lower(),
        description=str(job["description"]),
    )
    chain = ChainRef(
        chain_id=chain_id,
        contract=contract.lower(),
        job_id=job_id,
        event=facts.event_name,
        tx_hash="0x" + bytes(event["transactionHash"]).hex(),
        block_hash="0x" + bytes(event["blockHash"]).hex(),
        block_number=block_number,
        log_index=int(event["logIndex"]),
        reason=reason,
        deliverable=deliverable,
        evaluator=facts.evaluator,
    )
    return Verdict(chain, facts)


async def _get_job(w3: AsyncWeb3[Any], address: Any, job_id: int, block: int) -> dict[str, Any]:
    abi = get_job_abi()
    fn = w3.eth.contract(address=address, abi=abi).functions.getJob(job_id)
    result = await fn.call(block_identifier=block)
    names = [c["name"] for c in abi[0]["outputs"][0]["components"]]
    return dict(zip(names, result, strict=True))


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
    w3 = AsyncWeb3(AsyncHTTPProvider(rpc_url))
    try:
        node_chain = int(await w3.eth.chain_id)
        if chain_id is not None and node_chain != chain_id:
            raise ConfigError(f"the RPC endpoint serves chain {node_chain}, not {chain_id}")
        verdict = await read_verdict(w3, contract, job_id, node_chain, from_block)
    finally:
        await w3.provider.disconnect()
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
            return _history(config.database.path, config.chain.chain_id, args, out)
        verifier = build_verifier(config.verdicts)
        if args.from_index:
            item = _from_index(config.database.path, config.chain.chain_id, args)
            outcome = asyncio.run(verify_verdict(item, verifier))
            _print_outcome(outcome, args.json, out)
            return exit_code(outcome.status)
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
    except (TimeoutError, OSError, ValueError, aiohttp.ClientError, Web3Exception) as exc:
        # web3 and aiohttp messages may quote the endpoint URL; name the kind of failure only
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
    if not Path(db_path).exists():
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
    if not Path(db_path).exists():
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
