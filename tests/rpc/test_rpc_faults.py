"""The client survives real-looking provider faults injected by the proxy in front of anvil."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import pytest
from rpc_fixtures import EMITTER, EMITTER_B, LogChain, RecordingObserver
from support.rpc_proxy import RpcProxy

from keeper.rpc import (
    AlreadyKnownError,
    EndpointConfig,
    NonceTooLowError,
    RateLimitedError,
    RpcClient,
    RpcTimeoutError,
    TransientRpcError,
    UnderpricedError,
)
from keeper.rpc.errors import RpcError


def fast_client(
    *endpoints: EndpointConfig, observer: RecordingObserver | None = None, **kw: float
) -> RpcClient:
    settings: dict[str, float] = {
        "timeout": 1.0,
        "max_attempts": 4,
        "retry_initial": 0.01,
        "retry_max": 1.0,
        "backoff_base": 0.01,
        "backoff_cap": 1.0,
    }
    settings.update(kw)
    return RpcClient(
        list(endpoints),
        observer=observer,
        timeout=settings["timeout"],
        max_attempts=int(settings["max_attempts"]),
        retry_initial=settings["retry_initial"],
        retry_max=settings["retry_max"],
        backoff_base=settings["backoff_base"],
        backoff_cap=settings["backoff_cap"],
    )


@pytest.fixture
async def pair(log_chain: LogChain) -> AsyncIterator[tuple[RpcProxy, RpcProxy]]:
    """Two proxies in front of the same node: two "providers" to fail over between."""
    async with RpcProxy(log_chain.url) as a, RpcProxy(log_chain.url) as b:
        yield a, b


class TestGarbage:
    @pytest.mark.parametrize("fault", ["garbage", "truncate", "deep", "wrong_id", "null_result"])
    async def test_bad_body_is_retried(
        self, fault: str, client: RpcClient, proxy: RpcProxy, observer: RecordingObserver
    ) -> None:
        """One garbage answer is classified transient and the call succeeds on retry."""
        proxy.rules.on("eth_blockNumber", **{fault: 1})
        assert await client.block_number() == 120
        assert proxy.count(fault, "eth_blockNumber") == 1
        assert observer.outcomes("eth_blockNumber") == ["transient", "ok"]

    async def test_persistent_garbage_names_method_and_endpoint(
        self, client: RpcClient, proxy: RpcProxy
    ) -> None:
        """When every attempt is garbage the error names method, endpoint and attempts."""
        proxy.rules.on("eth_chainId", garbage=100)
        with pytest.raises(TransientRpcError) as info:
            await client.chain_id()
        message = str(info.value)
        assert "eth_chainId" in message and "rpc0" in message and "after 4 attempts" in message
        assert proxy.count("garbage") == 4

    async def test_invalid_logs_are_refetched(self, client: RpcClient, proxy: RpcProxy) -> None:
        """A null getLogs result is refused and the logs are fetched again."""
        proxy.rules.on("eth_getLogs", null_result=1)
        logs = await client.get_logs([EMITTER], 0, 120)
        assert len(logs) == 13
        assert len(proxy.requests_for("eth_getLogs")) == 2


class TestFailover:
    async def test_bad_endpoint_is_avoided(
        self, pair: tuple[RpcProxy, RpcProxy], observer: RecordingObserver
    ) -> None:
        """A provider answering 503 is backed off and calls go to the healthy one."""
        bad, good = pair
        bad.rules.on("eth_blockNumber", http_error=1000)
        client = fast_client(
            EndpointConfig("bad", bad.url),
            EndpointConfig("good", good.url),
            observer=observer,
            backoff_base=5.0,
            backoff_cap=5.0,
        )
        async with client:
            for _ in range(5):
                assert await client.block_number() == 120
        assert bad.count("http_error") == 1  # tried once, then backed off
        assert len(good.requests_for("eth_blockNumber")) == 5
        health = {h.name: h for h in client.health()}
        assert health["bad"].failures == 1 and health["good"].failures == 0
        assert ("bad", 5.0) in observer.backoffs

    async def test_timeout_fails_over(self, pair: tuple[RpcProxy, RpcProxy]) -> None:
        """A provider that hangs past the request timeout is left for another."""
        slow, fast = pair
        slow.rules.on("eth_chainId", timeout=5, delay=3.0)
        async with fast_client(
            EndpointConfig("slow", slow.url), EndpointConfig("fast", fast.url), timeout=0.3
        ) as client:
            started = time.monotonic()
            assert await client.chain_id() == 31337
            assert time.monotonic() - started < 2.0
        assert slow.count("timeout") == 1
        assert len(fast.requests_for("eth_chainId")) == 1

    async def test_timeouts_everywhere_raise_timeout(
        self, client: RpcClient, proxy: RpcProxy
    ) -> None:
        """With a single hanging endpoint the caller gets RpcTimeoutError, retryable."""
        proxy.rules.on("eth_chainId", timeout=10, delay=3.0)
        fast = fast_client(EndpointConfig("only", proxy.url), timeout=0.2, max_attempts=2)
        async with fast:
            with pytest.raises(RpcTimeoutError) as info:
                await fast.chain_id()
        assert info.value.failure.kind == "timeout"

    async def test_lagging_node_is_detected_and_bypassed(
        self, pair: tuple[RpcProxy, RpcProxy], log_chain: LogChain
    ) -> None:
        """head_of_each shows the lag; a log query past the lagging head fails over."""
        lagging, fresh = pair
        lagging.rules.lag = 10
        # A slow first answer from the fresh node ranks the lagging one first.
        fresh.rules.on("eth_blockNumber", timeout=1, delay=0.2)
        async with fast_client(
            EndpointConfig("lagging", lagging.url), EndpointConfig("fresh", fresh.url)
        ) as client:
            heads = await client.head_of_each()
            assert heads == {"lagging": 110, "fresh": 120}
            logs = await client.get_logs([EMITTER], 100, 120)
        assert [lg.block_number for lg in logs] == [
            b for i, b in enumerate(log_chain.log_blocks) if b >= 100 and i % 3
        ]
        assert lagging.count("lag", "eth_getLogs") == 1
        assert len(fresh.requests_for("eth_getLogs")) == 1

    async def test_must_exist_block_fails_over_from_lagging_node(
        self, pair: tuple[RpcProxy, RpcProxy], log_chain: LogChain
    ) -> None:
        """A lagging node's null for a known block is believed only without must_exist."""
        lagging, fresh = pair
        lagging.rules.lag = 10
        async with fast_client(EndpointConfig("lagging", lagging.url)) as only_lagging:
            assert await only_lagging.get_block(115) is None
        fresh.rules.on("eth_blockNumber", timeout=1, delay=0.2)
        async with fast_client(
            EndpointConfig("lagging", lagging.url), EndpointConfig("fresh", fresh.url)
        ) as client:
            await client.head_of_each()  # ranks the lagging node first
            header = await client.get_block(115, must_exist=True)
        assert header is not None and header.hash == log_chain.ctl.block(115)["hash"]
        assert lagging.count("lag", "eth_getBlockByNumber") == 2
        assert len(fresh.requests_for("eth_getBlockByNumber")) == 1


class TestRateLimits:
    async def test_retry_after_is_honoured(
        self, client: RpcClient, proxy: RpcProxy, observer: RecordingObserver
    ) -> None:
        """A 429 with Retry-After backs the endpoint off for that long, then succeeds."""
        proxy.rules.on("eth_blockNumber", rate_limit=1, retry_after=0.4)
        started = time.monotonic()
        assert await client.block_number() == 120
        assert time.monotonic() - started >= 0.4
        assert observer.backoffs == [("rpc0", 0.4)]
        assert observer.outcomes("eth_blockNumber") == ["rate_limited", "ok"]

    async def test_exhausted_rate_limit_raises_retryable(self, proxy: RpcProxy) -> None:
        """Rate limits that never end surface as RateLimitedError, a RetryableError."""
        proxy.rules.on("eth_blockNumber", rate_limit=100, retry_after=0.05)
        async with fast_client(EndpointConfig("rpc0", proxy.url), max_attempts=3) as client:
            with pytest.raises(RateLimitedError):
                await client.block_number()
        assert proxy.count("rate_limit") == 3


class TestPoolAnswers:
    @pytest.mark.parametrize("client_name", ["geth", "anvil", "besu", "nethermind"])
    @pytest.mark.parametrize(
        ("kind", "error"),
        [
            ("nonce_too_low", NonceTooLowError),
            ("already_known", AlreadyKnownError),
            ("underpriced", UnderpricedError),
        ],
    )
    async def test_pool_refusals_raise_typed_errors_once(
        self,
        kind: str,
        error: type[RpcError],
        client_name: str,
        client: RpcClient,
        proxy: RpcProxy,
    ) -> None:
        """Each client's wording of a pool refusal maps to one class and is never retried."""
        proxy.rules.reject_tx(kind, client=client_name)
        with pytest.raises(error):
            await client.request("eth_sendRawTransaction", ["0x00"])
        assert len(proxy.requests_for("eth_sendRawTransaction")) == 1


class TestBatch:
    async def test_items_fail_and_recover_individually(
        self, client: RpcClient, proxy: RpcProxy
    ) -> None:
        """Per-item errors: deliberate ones are returned, transient ones retried alone."""
        proxy.rules.on("eth_getBlockByNumber", error=1, error_message="header not found")
        proxy.rules.on(
            "eth_getBalance", error=1, error_code=-32602, error_message="invalid argument 0"
        )
        results = await client.batch(
            [
                ("eth_getBlockByNumber", ["0x1", False]),
                ("eth_getBalance", ["0x0", "latest"]),
                ("eth_chainId", []),
            ]
        )
        assert isinstance(results[0], dict) and results[0]["number"] == "0x1"
        assert isinstance(results[1], RpcError) and results[1].failure.kind == "invalid_request"
        assert results[2] == "0x7a69"
        assert len(proxy.requests_for("eth_getBlockByNumber")) == 2
        assert len(proxy.requests_for("eth_getBalance")) == 1
        assert len(proxy.requests_for("eth_chainId")) == 1

    async def test_whole_batch_garbage_is_resent(self, client: RpcClient, proxy: RpcProxy) -> None:
        """A garbage reply to the whole batch sends the whole batch again."""
        proxy.rules.on("batch", garbage=1)
        blocks = await client.get_blocks(list(range(10)))
        assert [b.number for b in blocks if b] == list(range(10))
        assert proxy.count("garbage", "batch") == 1

    async def test_missing_item_is_refetched(self, client: RpcClient, proxy: RpcProxy) -> None:
        """A reply lacking an item (wrong id) gets that item re-requested."""
        proxy.rules.on("eth_getBlockByNumber", wrong_id=1)
        blocks = await client.get_blocks([4, 5, 6])
        assert [b.number for b in blocks if b] == [4, 5, 6]
        assert len(proxy.requests_for("eth_getBlockByNumber")) == 4

    async def test_large_batches_are_chunked(self, proxy: RpcProxy) -> None:
        """More calls than max_batch go out as several batches, results still in order."""
        client = RpcClient([EndpointConfig("rpc0", proxy.url)], max_batch=7)
        async with client:
            blocks = await client.get_blocks(list(range(30)))
        assert [b.number for b in blocks if b] == list(range(30))


class TestSecrets:
    async def test_url_never_in_errors_or_logs(
        self, proxy: RpcProxy, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An API key in the endpoint URL appears in no exception, repr or log line."""
        secret = "k3yS3cretValue0123456789"
        url = f"{proxy.url}/v3/{secret}"
        config = EndpointConfig.from_url(url)
        assert secret not in repr(config)
        proxy.rules.on("eth_chainId", garbage=100)
        caplog.set_level(logging.DEBUG)
        async with fast_client(config, max_attempts=2) as client:
            with pytest.raises(TransientRpcError) as info:
                await client.chain_id()
        assert secret not in str(info.value)
        assert secret not in caplog.text
        out, err = capsys.readouterr()
        assert secret not in out + err
        assert config.name in str(info.value)


class TestEmptyLogs:
    async def test_empty_answer_contradicting_bloom_is_rechecked(
        self, client: RpcClient, proxy: RpcProxy, log_chain: LogChain
    ) -> None:
        """An empty log list for a block whose bloom names our contract is asked again."""
        block = log_chain.ctl.block(log_chain.log_blocks[1])
        proxy.rules.on("eth_getLogs", empty_logs=1)
        logs = await client.get_logs_by_block_hash(
            [EMITTER], block["hash"], bloom=block["logsBloom"]
        )
        assert len(logs) == 1
        assert proxy.count("empty_logs") == 1
        assert len(proxy.requests_for("eth_getLogs")) == 2

    async def test_truly_empty_block_is_asked_once(
        self, client: RpcClient, proxy: RpcProxy, log_chain: LogChain
    ) -> None:
        """A block whose bloom rules our contract out is believed empty at the first answer."""
        block = log_chain.ctl.block(log_chain.log_blocks[1] + 1)
        logs = await client.get_logs_by_block_hash(
            [EMITTER], block["hash"], bloom=block["logsBloom"]
        )
        assert logs == []
        assert len(proxy.requests_for("eth_getLogs")) == 1


class TestBodyLimit:
    async def test_oversized_reply_is_refused(self, proxy: RpcProxy) -> None:
        """A reply larger than max_body is dropped as a transient fault, never parsed."""
        client = RpcClient([EndpointConfig("rpc0", proxy.url)], max_body=64, max_attempts=1)
        async with client:
            assert await client.chain_id() == 31337
            with pytest.raises(TransientRpcError) as info:
                await client.get_block("latest")
        assert "larger than 64 bytes" in str(info.value)


class TestBackoffAcrossCalls:
    async def test_retry_after_holds_for_the_next_call(self, proxy: RpcProxy) -> None:
        """After a 429 exhausts one call's attempts, the next call still waits out Retry-After."""
        proxy.rules.on("eth_chainId", rate_limit=1, retry_after=0.5)
        client = RpcClient([EndpointConfig("rpc0", proxy.url)], max_attempts=1)
        async with client:
            with pytest.raises(RateLimitedError):
                await client.chain_id()
            started = time.monotonic()
            assert await client.block_number() == 120
            assert time.monotonic() - started >= 0.4


class TestChaos:
    async def test_flaky_providers_lose_nothing(
        self, pair: tuple[RpcProxy, RpcProxy], log_chain: LogChain
    ) -> None:
        """With both providers failing a quarter of calls at random, every read still succeeds."""
        a, b = pair
        for proxy in pair:
            for method in ("eth_blockNumber", "eth_getLogs", "batch"):
                proxy.rules.on(method, flaky=0.25)
        async with fast_client(
            EndpointConfig("a", a.url), EndpointConfig("b", b.url), max_attempts=10
        ) as client:
            for _ in range(40):
                assert await client.block_number() == 120
            logs = await client.get_logs([EMITTER, EMITTER_B], 0, 120)
            blocks = await client.get_blocks(list(range(121)))
        assert [lg.block_number for lg in logs] == log_chain.log_blocks
        assert [blk.number for blk in blocks if blk] == list(range(121))
        assert a.count("flaky") + b.count("flaky") > 5
