"""Configured sources against a real local HTTP server and a real directory."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from evaluator_server import EvaluatorServer, Route

from keeper.errors import ConfigError
from keeper.verify.sources import (
    CONTENT_FILE_NAMES,
    ContentSource,
    DirectorySource,
    FetchContext,
    Fetched,
    HttpSource,
    Problem,
    SourceFailure,
)

REASON = "0x" + "ab" * 32
CTX = FetchContext(chain_id=31337, contract="0x" + "cd" * 20, job_id=7, reason=REASON)


class TestHttpSource:
    async def test_placeholders_are_filled(self, evaluator: EvaluatorServer) -> None:
        """Every placeholder is replaced by the job's validated values."""
        path = f"/v1/31337/{CTX.contract}/jobs/7/{REASON}"
        evaluator.serve(path, b'{"verdict":{}}')
        source = HttpSource(
            evaluator.base + "/v1/{chainId}/{contract}/jobs/{jobId}/{reason}", "/verdict"
        )
        result = await source.fetch(CTX)
        assert result == Fetched(b'{"verdict":{}}', "/verdict", "http:127.0.0.1")
        assert evaluator.requests == [path]

    async def test_not_found(self, evaluator: EvaluatorServer) -> None:
        """A 404 is a typed not_found failure, not an exception."""
        result = await HttpSource(evaluator.base + "/v1/jobs/{jobId}").fetch(CTX)
        assert isinstance(result, SourceFailure) and result.problem is Problem.NOT_FOUND

    async def test_server_error(self, evaluator: EvaluatorServer) -> None:
        """Other non-200 answers are http_error with the status, and no URL in the detail."""
        evaluator.serve("/v1/jobs/7", b"oops", status=503)
        result = await HttpSource(evaluator.base + "/v1/jobs/{jobId}?key=secret").fetch(CTX)
        assert isinstance(result, SourceFailure) and result.problem is Problem.HTTP_ERROR
        assert "503" in result.detail and "secret" not in repr(result)

    async def test_fifty_megabytes_are_cut_while_streaming(
        self, evaluator: EvaluatorServer
    ) -> None:
        """A 50 MB chunked body is abandoned just past the limit: fast and with bounded memory."""
        evaluator.routes["/big"] = Route(stream_bytes=50 * 1024 * 1024)
        source = HttpSource(evaluator.base + "/big", max_bytes=1 << 20)
        tracemalloc.start()
        try:
            result = await source.fetch(CTX)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert isinstance(result, SourceFailure) and result.problem is Problem.TOO_LARGE
        assert peak < 8 * 1024 * 1024

    async def test_declared_length_over_limit_is_refused_unread(
        self, evaluator: EvaluatorServer
    ) -> None:
        """A Content-Length above the limit is refused before the body is read."""
        evaluator.serve("/v1/jobs/7", b"x" * 5000)
        result = await HttpSource(evaluator.base + "/v1/jobs/{jobId}", max_bytes=4096).fetch(CTX)
        assert isinstance(result, SourceFailure) and result.problem is Problem.TOO_LARGE

    @pytest.mark.parametrize(("limit", "taken"), [(4096, True), (4095, False)])
    async def test_a_declared_length_of_exactly_the_limit_is_read(
        self, evaluator: EvaluatorServer, limit: int, taken: bool
    ) -> None:
        """The limit is the largest body taken: 4,096 bytes pass a limit of 4,096."""
        evaluator.serve("/v1/jobs/7", b"x" * 4096)
        result = await HttpSource(evaluator.base + "/v1/jobs/{jobId}", max_bytes=limit).fetch(CTX)
        if taken:
            assert isinstance(result, Fetched) and result.body == b"x" * 4096
        else:
            assert isinstance(result, SourceFailure) and result.problem is Problem.TOO_LARGE

    @pytest.mark.parametrize(("limit", "taken"), [(65536, True), (65535, False)])
    async def test_a_chunked_body_of_exactly_the_limit_is_read(
        self, evaluator: EvaluatorServer, limit: int, taken: bool
    ) -> None:
        """Without a declared length the count of what arrived decides, at the same edge."""
        evaluator.routes["/chunked"] = Route(stream_bytes=65536)  # one 64 KiB chunk
        result = await HttpSource(evaluator.base + "/chunked", max_bytes=limit).fetch(CTX)
        if taken:
            assert isinstance(result, Fetched) and len(result.body) == 65536
        else:
            assert isinstance(result, SourceFailure) and result.problem is Problem.TOO_LARGE

    async def test_timeout(self, evaluator: EvaluatorServer) -> None:
        """A server slower than the timeout gives a timeout failure after about the timeout."""
        evaluator.serve("/slow", b"{}", delay=5.0)
        started = time.monotonic()
        result = await HttpSource(evaluator.base + "/slow", timeout=0.3).fetch(CTX)
        assert isinstance(result, SourceFailure) and result.problem is Problem.TIMEOUT
        assert time.monotonic() - started < 2

    async def test_same_host_redirect_is_followed(self, evaluator: EvaluatorServer) -> None:
        """A redirect on the configured host is followed by hand."""
        evaluator.serve("/old/7", b"", status=302, headers={"Location": "/new/7"})
        evaluator.serve("/new/7", b"{}")
        result = await HttpSource(evaluator.base + "/old/{jobId}").fetch(CTX)
        assert isinstance(result, Fetched) and result.body == b"{}"
        assert evaluator.requests == ["/old/7", "/new/7"]

    async def test_redirect_off_host_is_refused(
        self, evaluator: EvaluatorServer, other_host: EvaluatorServer
    ) -> None:
        """A redirect to another origin is refused and the other host never sees a request."""
        other_host.serve("/steal", b"{}")
        evaluator.serve(
            "/v1/jobs/7", b"", status=307, headers={"Location": other_host.base + "/steal"}
        )
        result = await HttpSource(evaluator.base + "/v1/jobs/{jobId}").fetch(CTX)
        assert isinstance(result, SourceFailure) and result.problem is Problem.REDIRECT_REFUSED
        assert other_host.requests == []

    @pytest.mark.parametrize("location", ["http://[::1/x", "//[bad"])
    async def test_a_redirect_to_no_url_is_refused(
        self, evaluator: EvaluatorServer, location: str
    ) -> None:
        """A Location that is no URL (urljoin raises ValueError on it) is a refused
        redirect, not an exception out of the fetch."""
        evaluator.serve("/v1/jobs/7", b"", status=302, headers={"Location": location})
        result = await HttpSource(evaluator.base + "/v1/jobs/{jobId}").fetch(CTX)
        assert isinstance(result, SourceFailure) and result.problem is Problem.REDIRECT_REFUSED
        assert "not a URL" in result.detail

    async def test_redirect_loop_is_bounded(self, evaluator: EvaluatorServer) -> None:
        """A redirect loop stops after max_redirects hops."""
        evaluator.serve("/loop", b"", status=302, headers={"Location": "/loop"})
        result = await HttpSource(evaluator.base + "/loop", max_redirects=2).fetch(CTX)
        assert isinstance(result, SourceFailure) and result.problem is Problem.REDIRECT_REFUSED
        assert len(evaluator.requests) == 3

    async def test_connection_refused(self) -> None:
        """Nothing listening is a connection failure."""
        from keeper.devnet.anvil import free_port

        result = await HttpSource(f"http://127.0.0.1:{free_port()}/x").fetch(CTX)
        assert isinstance(result, SourceFailure) and result.problem is Problem.CONNECTION

    async def test_content_source_by_hash(self, evaluator: EvaluatorServer) -> None:
        """A content source fetches raw bytes addressed by {hash}."""
        digest = "0x" + "12" * 32
        evaluator.serve(f"/v1/content/{digest}", b"not json at all")
        ctx = FetchContext(chain_id=1, contract=CTX.contract, job_id=7, hash=digest)
        result = await ContentSource(evaluator.base + "/v1/content/{hash}").fetch(ctx)
        assert (
            isinstance(result, Fetched)
            and result.body == b"not json at all"
            and result.pointer == ""
        )

    @pytest.mark.parametrize(
        "template",
        [
            "http://{contract}.example/x",
            "ftp://host/{jobId}",
            "https://host/{url}",
            "relative/{jobId}",
        ],
    )
    def test_bad_templates(self, template: str) -> None:
        """Templates choosing the host, other schemes or unknown placeholders are config errors."""
        with pytest.raises(ConfigError):
            HttpSource(template)


class TestFetchContext:
    @pytest.mark.parametrize("field", ["contract", "reason", "hash"])
    def test_values_must_be_hex(self, field: str) -> None:
        """A value that is not lowercase hex cannot become part of a URL or a file name."""
        with pytest.raises(ValueError, match=field):
            FetchContext(chain_id=1, job_id=1, **{"contract": "0x00", field: "../../etc/passwd"})  # type: ignore[arg-type]


class TestDirectorySource:
    async def test_reason_name_wins_over_job_id(self, tmp_path: Path) -> None:
        """<reason>.json is preferred to <jobId>.json."""
        (tmp_path / f"{REASON}.json").write_bytes(b'{"by":"reason"}')
        (tmp_path / "7.json").write_bytes(b'{"by":"job"}')
        result = await DirectorySource(tmp_path).fetch(CTX)
        assert isinstance(result, Fetched) and result.body == b'{"by":"reason"}'

    async def test_job_id_name(self, tmp_path: Path) -> None:
        """Without a reason-named file, <jobId>.json is used."""
        (tmp_path / "7.json").write_bytes(b'{"by":"job"}')
        result = await DirectorySource(tmp_path).fetch(CTX)
        assert isinstance(result, Fetched) and result.body == b'{"by":"job"}'

    async def test_missing_and_oversized(self, tmp_path: Path) -> None:
        """No file is not_found; a file above the limit is too_large without being read whole."""
        assert (await DirectorySource(tmp_path).fetch(CTX)).problem is Problem.NOT_FOUND  # type: ignore[union-attr]
        (tmp_path / "7.json").write_bytes(b"x" * 2000)
        result = await DirectorySource(tmp_path, max_bytes=1000).fetch(CTX)
        assert isinstance(result, SourceFailure) and result.problem is Problem.TOO_LARGE

    @pytest.mark.parametrize(("limit", "taken"), [(1000, True), (999, False)])
    async def test_a_file_of_exactly_the_limit_is_read(
        self, tmp_path: Path, limit: int, taken: bool
    ) -> None:
        (tmp_path / "7.json").write_bytes(b"x" * 1000)
        result = await DirectorySource(tmp_path, max_bytes=limit).fetch(CTX)
        if taken:
            assert isinstance(result, Fetched) and result.body == b"x" * 1000
        else:
            assert isinstance(result, SourceFailure) and result.problem is Problem.TOO_LARGE

    async def test_content_by_hash(self, tmp_path: Path) -> None:
        """Content directories hold files named by the deliverable hash."""
        digest = "0x" + "34" * 32
        (tmp_path / digest).write_bytes(b"content")
        ctx = FetchContext(chain_id=1, contract=CTX.contract, job_id=7, hash=digest)
        result = await DirectorySource(tmp_path, CONTENT_FILE_NAMES).fetch(ctx)
        assert isinstance(result, Fetched) and result.body == b"content"

    def test_names_cannot_hold_paths(self, tmp_path: Path) -> None:
        """A configured name pattern with a separator is refused."""
        with pytest.raises(ConfigError):
            DirectorySource(tmp_path, ("../{jobId}.json",))
