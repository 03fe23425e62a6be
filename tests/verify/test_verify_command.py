"""``keeper verify`` against a real anvil node running a minimal ERC-8183 stand-in contract."""

from __future__ import annotations

import io
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from evaluator_server import EvaluatorServer
from verify_helpers import COMPLETE, DESCRIPTION, FIXTURES, TOO_FEW, body, verdict
from web3 import HTTPProvider, Web3

from keeper.devnet.anvil import AnvilProcess
from keeper.rpc.client import RpcClient
from keeper.rpc.config import EndpointConfig
from keeper.store.db import connect
from keeper.store.migrations import migrate
from keeper.verify.canonical import digest, keccak_hex
from keeper.verify.command import main, read_verdict, verify_standalone
from keeper.verify.report import report_from_bytes
from keeper.verify.sources import (
    CONTENT_FILE_NAMES,
    ContentSource,
    DirectorySource,
    HttpSource,
)
from keeper.verify.verdict import Verifier
from keeper.verify.verifier import verify_and_record


@dataclass
class Commerce:
    w3: Web3
    contract: Any
    url: str
    last_receipt: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return str(self.contract.address).lower()

    def transact(self, fn: Any, sender: int) -> dict[str, Any]:
        tx = fn.transact({"from": self.w3.eth.accounts[sender]})
        return dict(self.w3.eth.wait_for_transaction_receipt(tx))

    def job(self, description: str, content: bytes | None, doc: dict[str, Any] | None) -> int:
        """Create a job, submit ``content`` and end it with ``doc``'s digest; returns the job id."""
        evaluator = self.w3.eth.accounts[2]
        create = self.contract.functions.createJob(
            self.w3.eth.accounts[1], evaluator, 2**40, description, "0x" + "00" * 20, 0
        )
        self.transact(create, 0)
        job_id = int(self.contract.functions.jobCounter().call())
        if content is not None:
            self.transact(
                self.contract.functions.submit(job_id, bytes.fromhex(keccak_hex(content)[2:]), b""),
                1,
            )
        if doc is not None:
            reason = bytes.fromhex(digest(doc)[2:])
            end = (
                self.contract.functions.complete
                if doc["esito"] == "complete"
                else self.contract.functions.reject
            )
            self.last_receipt = self.transact(end(job_id, reason, b""), 2)
        return job_id


@pytest.fixture(scope="module")
def commerce(module_anvil: AnvilProcess) -> Commerce:
    artifact = json.loads((FIXTURES / "MiniCommerce.json").read_text())
    w3 = Web3(HTTPProvider(module_anvil.url))
    factory = w3.eth.contract(abi=artifact["abi"], bytecode=artifact["bytecode"])
    receipt = w3.eth.wait_for_transaction_receipt(
        factory.constructor().transact({"from": w3.eth.accounts[0]})
    )
    contract = w3.eth.contract(address=receipt["contractAddress"], abi=artifact["abi"])
    return Commerce(w3, contract, module_anvil.url)


@dataclass
class Setup:
    config: Path
    verdicts: Path
    contents: Path
    db: Path


@pytest.fixture
def setup(tmp_path: Path, commerce: Commerce) -> Setup:
    verdicts, contents = tmp_path / "verdicts", tmp_path / "contents"
    verdicts.mkdir()
    contents.mkdir()
    db = tmp_path / "keeper.db"
    config = tmp_path / "keeper.toml"
    config.write_text(
        f"""
[chain]
chain_id = 31337
rpc_urls = ["{commerce.url}"]
rpc_names = ["anvil"]

[database]
path = "{db}"

[verdicts]
sources = [{{ kind = "directory", path = "{verdicts}" }}]
content_sources = [{{ kind = "directory", path = "{contents}" }}]
"""
    )
    return Setup(config, verdicts, contents, db)


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def _store(setup: Setup, doc: dict[str, Any] | None, content: bytes | None) -> None:
    if doc is not None:
        (setup.verdicts / f"{digest(doc)}.json").write_bytes(body(doc))
    if content is not None:
        (setup.contents / keccak_hex(content)).write_bytes(content)


class TestStandalone:
    async def test_verified_over_http(self, commerce: Commerce, evaluator: EvaluatorServer) -> None:
        """Reading the event and getJob from anvil, a published SchemaEval verdict verifies."""
        next_id = int(commerce.contract.functions.jobCounter().call()) + 1
        doc = verdict(next_id, TOO_FEW, "reject", ["/fornitori: too few"])
        job_id = commerce.job(DESCRIPTION, TOO_FEW, doc)
        evaluator.serve(f"/v1/jobs/{job_id}", json.dumps({"verdict": doc}).encode())
        evaluator.serve(f"/v1/content/{keccak_hex(TOO_FEW)}", TOO_FEW)
        report = await verify_standalone(
            commerce.url,
            commerce.address,
            job_id,
            [HttpSource(evaluator.base + "/v1/jobs/{jobId}", "/verdict")],
            [ContentSource(evaluator.base + "/v1/content/{hash}")],
            31337,
        )
        assert report.body["status"] == "verified", report.body
        chain = report.body["chain"]
        receipt = commerce.last_receipt
        assert isinstance(chain, dict)
        assert chain["txHash"] == "0x" + bytes(receipt["transactionHash"]).hex()
        assert chain["blockHash"] == "0x" + bytes(receipt["blockHash"]).hex()
        assert (chain["event"], chain["deliverable"]) == ("JobRejected", keccak_hex(TOO_FEW))

    async def test_reads_the_chain_facts(self, commerce: Commerce) -> None:
        """The verdict's facts come from the event, the last JobSubmitted and getJob."""
        next_id = int(commerce.contract.functions.jobCounter().call()) + 1
        doc = verdict(next_id, COMPLETE, "complete")
        job_id = commerce.job(DESCRIPTION, COMPLETE, doc)
        async with RpcClient([EndpointConfig.from_url(commerce.url)]) as rpc:
            item = await read_verdict(rpc, commerce.address, job_id, 31337)
        assert item.facts.reason == digest(doc)
        assert item.facts.deliverable == keccak_hex(COMPLETE)
        assert item.facts.description == DESCRIPTION
        assert item.facts.evaluator == str(commerce.w3.eth.accounts[2]).lower()


class TestCommand:
    def _job(
        self,
        commerce: Commerce,
        setup: Setup,
        content: bytes,
        esito: str,
        motivi: list[str],
        publish: bool = True,
        tamper: bool = False,
    ) -> int:
        next_id = int(commerce.contract.functions.jobCounter().call()) + 1
        doc = verdict(next_id, content, esito, motivi)
        job_id = commerce.job(DESCRIPTION, content, doc)
        if publish:
            _store(setup, doc, content)
        if tamper:
            (setup.verdicts / f"{digest(doc)}.json").write_bytes(body({**doc, "motivi": ["x"]}))
        return job_id

    def test_json_report_reproduces_byte_for_byte(self, commerce: Commerce, setup: Setup) -> None:
        """Two runs print identical report bytes whose digest is the report's own."""
        job_id = self._job(commerce, setup, COMPLETE, "complete", [])
        args = (
            "--config",
            str(setup.config),
            "--contract",
            commerce.address,
            "--id",
            str(job_id),
            "--json",
        )
        first, second = _run(*args), _run(*args)
        assert first[0] == 0 and first == second
        report = report_from_bytes(first[1].rstrip("\n").encode())
        assert report.canonical == first[1].rstrip("\n").encode()
        assert report.body["status"] == "verified"

    def test_human_output(self, commerce: Commerce, setup: Setup) -> None:
        """Without --json the status, failures and digests are printed, and no RPC URL."""
        job_id = self._job(commerce, setup, COMPLETE, "complete", [], tamper=True)
        code, text = _run(
            "--config", str(setup.config), "--contract", commerce.address, "--id", str(job_id)
        )
        assert code == 1
        assert "status: mismatch" in text and "verdict_hash_mismatch at /reason" in text
        assert commerce.url not in text

    @pytest.mark.parametrize(
        ("content", "esito", "motivi", "publish", "expected"),
        [
            (TOO_FEW, "complete", [], True, 1),
            (TOO_FEW, "reject", ["/fornitori: few"], True, 0),
            (COMPLETE, "complete", [], False, 3),
        ],
        ids=["disagrees", "verified-reject", "unavailable"],
    )
    def test_exit_codes(
        self,
        commerce: Commerce,
        setup: Setup,
        content: bytes,
        esito: str,
        motivi: list[str],
        publish: bool,
        expected: int,
    ) -> None:
        """0 verified, 1 failed, 3 undetermined."""
        job_id = self._job(commerce, setup, content, esito, motivi, publish=publish)
        code, _ = _run(
            "--config", str(setup.config), "--contract", commerce.address, "--id", str(job_id)
        )
        assert code == expected

    def test_job_without_verdict(self, commerce: Commerce, setup: Setup) -> None:
        """A job that has no verdict event yet is undetermined (3)."""
        job_id = commerce.job(DESCRIPTION, COMPLETE, None)
        code, _ = _run(
            "--config", str(setup.config), "--contract", commerce.address, "--id", str(job_id)
        )
        assert code == 3

    @pytest.mark.parametrize(
        "argv",
        [
            ["--contract", "0x" + "00" * 20, "--id", "1"],
            ["--config", "CONFIG", "--contract", "nope", "--id", "1"],
            ["--config", "CONFIG", "--contract", "0x" + "00" * 20],
            ["--config", "/nonexistent.toml", "--contract", "0x" + "00" * 20, "--id", "1"],
        ],
        ids=["no-config", "bad-address", "no-id", "missing-file"],
    )
    def test_usage_errors(self, setup: Setup, argv: list[str]) -> None:
        """Missing or malformed arguments and configuration exit with 2."""
        code, _ = _run(*[str(setup.config) if a == "CONFIG" else a for a in argv])
        assert code == 2

    async def test_history(self, commerce: Commerce, setup: Setup) -> None:
        """--history prints a stored chain of revisions and exits 1 once a report is edited."""
        job_id = self._job(commerce, setup, COMPLETE, "complete", [], publish=False)
        async with RpcClient([EndpointConfig.from_url(commerce.url)]) as rpc:
            item = await read_verdict(rpc, commerce.address, job_id, 31337)
        conn = connect(setup.db)
        migrate(conn)
        verifier = Verifier(
            [DirectorySource(setup.verdicts)],
            [DirectorySource(setup.contents, CONTENT_FILE_NAMES)],
        )
        await verify_and_record(conn, item, verifier, now=1)
        _store(setup, verdict(job_id, COMPLETE, "complete"), COMPLETE)
        await verify_and_record(conn, item, verifier, now=100)
        args = (
            "--config",
            str(setup.config),
            "--contract",
            commerce.address,
            "--id",
            str(job_id),
            "--history",
        )
        code, text = _run(*args)
        assert code == 0 and "revision 1: verified" in text and "history: valid" in text
        _edit_first_report(conn)
        conn.close()
        code, text = _run(*args)
        assert code == 1 and "digest does not match" in text


def _edit_first_report(conn: sqlite3.Connection) -> None:
    conn.execute(
        "UPDATE verification_reports "
        "SET report_json = replace(report_json, 'unavailable', 'verified') WHERE revision_count = 0"
    )


class TestERC8183Layout:
    """Verification reads the description through ERC8183's 13-field getJob."""

    async def test_verified_on_the_erc8183_escrow(
        self, module_anvil: AnvilProcess, evaluator: EvaluatorServer
    ) -> None:
        from keeper.devnet.anvil import DEV_KEYS
        from keeper.devnet.contracts import load_abi
        from keeper.devnet.deploy import deploy_contract

        w3 = Web3(HTTPProvider(module_anvil.url))
        address = deploy_contract(w3, DEV_KEYS[0], "ERC8183", w3.eth.accounts[9], 100, 50)
        escrow = w3.eth.contract(address=Web3.to_checksum_address(address), abi=load_abi("ERC8183"))
        commerce = Commerce(w3, escrow, module_anvil.url)
        client, provider, judge = (w3.eth.accounts[i] for i in (0, 1, 2))
        expiry = int(w3.eth.get_block("latest")["timestamp"]) + 3600
        fns = escrow.functions
        commerce.transact(
            fns.createJob(provider, judge, expiry, DESCRIPTION, "0x" + "00" * 20, 0, b""), 0
        )
        job_id = int(fns.jobCounter().call())
        doc = verdict(job_id, TOO_FEW, "reject", ["/fornitori: too few"])
        commerce.transact(fns.submit(job_id, bytes.fromhex(keccak_hex(TOO_FEW)[2:]), b""), 1)
        commerce.transact(fns.reject(job_id, bytes.fromhex(digest(doc)[2:]), b""), 2)
        async with RpcClient([EndpointConfig.from_url(module_anvil.url)]) as rpc:
            item = await read_verdict(rpc, address, job_id, 31337)
        assert item.facts.description == DESCRIPTION
        assert item.facts.evaluator == str(judge).lower() != str(client).lower()
        evaluator.serve(f"/v1/jobs/{job_id}", json.dumps({"verdict": doc}).encode())
        evaluator.serve(f"/v1/content/{keccak_hex(TOO_FEW)}", TOO_FEW)
        report = await verify_standalone(
            module_anvil.url,
            address,
            job_id,
            [HttpSource(evaluator.base + "/v1/jobs/{jobId}", "/verdict")],
            [ContentSource(evaluator.base + "/v1/content/{hash}")],
            31337,
        )
        assert report.body["status"] == "verified", report.body
