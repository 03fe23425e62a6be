"""The SchemaEval stand-in: verdict documents from the shared fixtures, their digests,
and the HTTP routes the daemon's verdict and content sources read."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import rfc8785
from eth_utils.crypto import keccak

from keeper.devnet.evaluator_service import (
    FIXTURE_FILES,
    EvaluatorService,
    VerdictBook,
    fixtures_dir,
    keccak_hex,
    load_fixtures,
    schemaeval_verdict,
    verdict_digest,
)

PACKAGED = Path(__file__).resolve().parents[2] / "keeper" / "devnet" / "fixtures" / "schemaeval"
COMMERCE = "0x" + "c0" * 20
LEGACY = "0x" + "1e" * 20


def pointers(motivi: list[str]) -> set[str]:
    return {m.partition(": ")[0] for m in motivi}


class TestFixtures:
    def test_packaged_copy_matches_the_shared_fixtures(self) -> None:
        """The committed fallback is byte-identical to the shared fixtures when present."""
        shared = fixtures_dir()
        if shared == PACKAGED:
            pytest.skip("shared fixtures not present beside the project")
        for name in FIXTURE_FILES:
            assert (PACKAGED / name).read_bytes() == (shared / name).read_bytes(), name

    def test_description_is_compact_json_with_schema(self) -> None:
        """The on-chain description is the fixture's JSON, compacted, under SchemaEval's 4 KB."""
        fx = load_fixtures(PACKAGED)
        original = (PACKAGED / "job-description.json").read_bytes()
        assert json.loads(fx.description) == json.loads(original)
        assert len(fx.description.encode()) < min(len(original), 4096)
        assert set(json.loads(fx.description)) == {"brief", "schema"}


class TestSchemaEvalVerdict:
    @pytest.mark.parametrize(
        ("attr", "esito", "locations"),
        [
            ("complete", "complete", set()),
            ("too_few", "reject", {"/fornitori"}),
            ("bad_piva", "reject", {"/fornitori/0/piva", "/fornitori/2/piva"}),
        ],
    )
    def test_schema_outcomes(self, attr: str, esito: str, locations: set[str]) -> None:
        """Each fixture deliverable gets the esito and failing pointers the fixtures describe."""
        fx = load_fixtures(PACKAGED)
        content: bytes = getattr(fx, attr)
        doc = schemaeval_verdict(7, fx.description, content, keccak_hex(content))
        assert doc["esito"] == esito
        assert pointers(doc["motivi"]) == locations
        assert (doc["evaluator"], doc["version"], doc["jobId"]) == ("SchemaEval", 1, "7")
        assert doc["deliverable"] == "0x" + keccak(content).hex()

    def test_not_json_and_hash_mismatch_reject_without_pointers(self) -> None:
        """Content that is not JSON, or does not hash to the deliverable, is rejected."""
        fx = load_fixtures(PACKAGED)
        not_json = schemaeval_verdict(1, fx.description, fx.not_json, keccak_hex(fx.not_json))
        wrong = schemaeval_verdict(1, fx.description, fx.complete, keccak_hex(b"other"))
        for doc in (not_json, wrong):
            assert doc["esito"] == "reject"
            assert not any(m.startswith("/") for m in doc["motivi"])
        assert not_json["motivi"] != wrong["motivi"]

    def test_digest_is_keccak_of_canonical_bytes(self) -> None:
        """The reason is keccak256 of RFC 8785 bytes: key order in the dict does not matter."""
        fx = load_fixtures(PACKAGED)
        doc = schemaeval_verdict(3, fx.description, fx.bad_piva, keccak_hex(fx.bad_piva))
        shuffled = dict(reversed(list(doc.items())))
        assert verdict_digest(doc) == verdict_digest(shuffled)
        compact = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert rfc8785.dumps(doc) == compact.encode()  # ASCII-only document: JCS == sorted compact
        assert verdict_digest(doc) == "0x" + keccak(compact.encode()).hex()
        assert verdict_digest({**doc, "esito": "complete"}) != verdict_digest(doc)


@pytest.fixture
async def service() -> AsyncIterator[tuple[EvaluatorService, str]]:
    book = VerdictBook(COMMERCE)
    svc = EvaluatorService(book)
    url = await svc.start()
    try:
        yield svc, url
    finally:
        await svc.stop()


class TestHttpRoutes:
    async def test_jobs_by_primary_and_by_contract(
        self, service: tuple[EvaluatorService, str]
    ) -> None:
        """/v1/jobs/{id} serves the primary contract; the contract route keeps ids apart."""
        svc, url = service
        svc.book.publish_job(COMMERCE, 4, {"id": "4"}, {"esito": "complete"})
        svc.book.publish_job("0x" + "1E" * 20, 4, {"id": "4L"}, None)  # mixed case
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/v1/jobs/4") as r:
                assert r.status == 200
                assert await r.json() == {"job": {"id": "4"}, "verdict": {"esito": "complete"}}
            async with http.get(f"{url}/v1/contracts/{LEGACY}/jobs/4") as r:
                assert await r.json() == {"job": {"id": "4L"}}
            async with http.get(f"{url}/v1/contracts/{COMMERCE}/jobs/4") as r:
                assert (await r.json())["job"] == {"id": "4"}
            for missing in ("/v1/jobs/5", f"/v1/contracts/{LEGACY}/jobs/5", "/v1/jobs/abc"):
                async with http.get(url + missing) as r:
                    assert r.status == 404, missing

    async def test_content_by_hash(self, service: tuple[EvaluatorService, str]) -> None:
        """/v1/content/{hash} returns the exact bytes whose keccak256 is the hash."""
        svc, url = service
        body = b'{"x": 1}\n'
        digest = svc.book.publish_content(body)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/v1/content/{digest}") as r:
                assert r.status == 200
                got = await r.read()
                assert got == body and keccak_hex(got) == digest
            async with http.get(f"{url}/v1/content/0x{'00' * 32}") as r:
                assert r.status == 404
            async with http.get(f"{url}/v1/content/../etc") as r:
                assert r.status == 404

    async def test_stop_releases_the_port(self, service: tuple[EvaluatorService, str]) -> None:
        """After stop the port refuses connections."""
        svc, url = service
        await svc.stop()
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientConnectionError):
                await http.get(f"{url}/v1/jobs/1")
