"""Typed client methods return validated values from a real anvil node."""

from __future__ import annotations

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from rpc_fixtures import (
    EMITTER,
    EMITTER_B,
    REVERTER,
    TOPIC,
    LogChain,
    RecordingObserver,
    wait_receipt,
)
from support.rpc_proxy import RpcProxy

from keeper.devnet.anvil import DEV_KEYS, AnvilProcess, ChainControl
from keeper.rpc import (
    EndpointConfig,
    ExecutionRevertedError,
    MethodNotFoundError,
    RpcClient,
    block_param,
    tx_hash_of,
)


class TestReads:
    async def test_chain_id_and_head(self, client: RpcClient, log_chain: LogChain) -> None:
        """chain_id and block_number are ints matching the node."""
        assert await client.chain_id() == 31337
        assert await client.block_number() == log_chain.ctl.block_number()

    async def test_get_block_by_number_tag_and_hash(
        self, client: RpcClient, log_chain: LogChain
    ) -> None:
        """A block fetched by number, by hash and by tag is the same header."""
        by_number = await client.get_block(7)
        assert by_number is not None
        assert by_number.hash == log_chain.ctl.block(7)["hash"]
        by_hash = await client.get_block(by_number.hash)
        assert by_hash == by_number
        parent = await client.get_block(6)
        assert parent is not None and by_number.parent_hash == parent.hash
        finalized = await client.get_block("finalized")
        head = await client.get_block("latest")
        assert finalized is not None and head is not None
        assert finalized.number == head.number - 8  # 4 slots an epoch, two epochs

    async def test_missing_block_is_none(self, client: RpcClient) -> None:
        """A block the node does not have is None, by number and by hash."""
        assert await client.get_block(10_000) is None
        assert await client.get_block("0x" + "12" * 32) is None

    async def test_get_blocks_batch(self, client: RpcClient, log_chain: LogChain) -> None:
        """A batch of headers comes back in request order, None past the head."""
        head = log_chain.ctl.block_number()
        blocks = await client.get_blocks([3, 1, 2, head + 50])
        assert [b.number if b else None for b in blocks] == [3, 1, 2, None]
        assert blocks[1] is not None and blocks[2] is not None
        assert blocks[2].parent_hash == blocks[1].hash

    async def test_get_logs_matches_node(self, client: RpcClient, log_chain: LogChain) -> None:
        """get_logs returns exactly the emitted logs, normalised, in chain order."""
        logs = await client.get_logs([EMITTER.upper().replace("0X", "0x"), EMITTER_B], 0, 120)
        assert [lg.block_number for lg in logs] == log_chain.log_blocks
        assert all(lg.topics == (TOPIC,) for lg in logs)
        assert [int.from_bytes(lg.data, "big") for lg in logs] == list(range(20))
        only_b = await client.get_logs([EMITTER_B], 0, 120)
        assert {lg.address for lg in only_b} == {EMITTER_B}
        assert len(only_b) == 7  # i % 3 == 0 for i in 0..19

    async def test_get_logs_by_block_hash(self, client: RpcClient, log_chain: LogChain) -> None:
        """Logs by block hash are that block's logs and carry its hash."""
        number = log_chain.log_blocks[4]
        block_hash = log_chain.ctl.block(number)["hash"]
        logs = await client.get_logs_by_block_hash([EMITTER, EMITTER_B], block_hash)
        assert len(logs) == 1
        assert logs[0].block_hash == block_hash and logs[0].block_number == number

    async def test_call_pinned_to_block_hash(self, client: RpcClient, log_chain: LogChain) -> None:
        """eth_call accepts a block hash (EIP-1898) and returns raw bytes."""
        block_hash = log_chain.ctl.block(5)["hash"]
        assert await client.call(EMITTER, b"", block_hash) == b""

    async def test_revert_carries_data_and_is_not_retried(
        self, client: RpcClient, proxy: RpcProxy, observer: RecordingObserver
    ) -> None:
        """A revert raises at once with the revert bytes, after a single request."""
        with pytest.raises(ExecutionRevertedError) as info:
            await client.call(REVERTER, b"\x01")
        assert info.value.revert_data == (42).to_bytes(32, "big")
        assert len(proxy.requests_for("eth_call")) == 1
        assert observer.outcomes("eth_call") == ["execution_reverted"]

    async def test_method_not_found_is_not_retried(
        self, client: RpcClient, proxy: RpcProxy
    ) -> None:
        """An unknown method raises MethodNotFoundError after exactly one request."""
        with pytest.raises(MethodNotFoundError):
            await client.request("eth_doesNotExist", [])
        assert len(proxy.requests_for("eth_doesNotExist")) == 1

    async def test_balance_nonce_fees(self, client: RpcClient, log_chain: LogChain) -> None:
        """Balance, nonce and fee history come back as ints / a checked object."""
        sender = log_chain.ctl.call("eth_accounts")[0]
        assert await client.get_balance(sender) > 0
        assert await client.get_transaction_count(sender, "latest") == 20
        history = await client.fee_history(3, "latest", [50])
        assert len(history["baseFeePerGas"]) == 4

    def test_block_param_forms(self) -> None:
        """Numbers become hex, tags pass through, hashes become EIP-1898 objects."""
        assert block_param(255) == "0xff"
        assert block_param("safe") == "safe"
        assert block_param("0x" + "AB" * 32) == {"blockHash": "0x" + "ab" * 32}
        with pytest.raises(ValueError):
            block_param("0x" + "ab" * 32, allow_hash=False)
        with pytest.raises(ValueError, match="not a block number, tag or hash: 'yesterday'"):
            block_param("yesterday")
        with pytest.raises(ValueError) as info:
            block_param("z" * 5000)
        assert str(info.value).endswith("'" + "z" * 76 + "...")


class TestTransactions:
    async def test_send_estimate_receipt(self, anvil: AnvilProcess) -> None:
        """A signed transfer is estimated, sent, and its receipt and nonce are visible."""
        account = Account.from_key(DEV_KEYS[3])
        async with RpcClient([EndpointConfig("anvil", anvil.url)]) as client:
            tx = {"from": account.address, "to": account.address, "value": hex(1)}
            gas = await client.estimate_gas(tx)
            assert gas == 21_000
            raw = _signed(account, nonce=0)
            tx_hash = await client.send_raw_transaction(raw)
            assert tx_hash == tx_hash_of(raw)
            wait_receipt(ChainControl(anvil.url), tx_hash)
            receipt = await client.get_transaction_receipt(tx_hash)
            assert receipt is not None and receipt["status"] == "0x1"
            tx_obj = await client.get_transaction_by_hash(tx_hash)
            assert tx_obj is not None and tx_obj["hash"] == tx_hash
            assert await client.get_transaction_count(account.address) == 1
            assert await client.get_transaction_receipt("0x" + "77" * 32) is None

    @pytest.mark.parametrize("drop_mode", ["close", "timeout"])
    async def test_lost_reply_resend_returns_hash_once(
        self, drop_mode: str, anvil: AnvilProcess
    ) -> None:
        """When the reply to a broadcast is lost, the retry still yields the hash; one tx lands."""
        account = Account.from_key(DEV_KEYS[4])
        ctl = ChainControl(anvil.url)
        for automine in (True, False):
            ctl.set_automine(automine)
            nonce = int(ctl.call("eth_getTransactionCount", account.address, "pending"), 16)
            with RpcProxy(anvil.url) as proxy:
                proxy.rules.on(
                    "eth_sendRawTransaction", drop_reply=1, drop_mode=drop_mode, delay=1.0
                )
                async with RpcClient(
                    [EndpointConfig("p", proxy.url)],
                    timeout=0.3,
                    retry_initial=0.01,
                    backoff_base=0.01,
                ) as client:
                    raw = _signed(account, nonce=nonce)
                    assert await client.send_raw_transaction(raw) == tx_hash_of(raw)
                assert proxy.count("drop_reply") == 1
                assert len(proxy.requests_for("eth_sendRawTransaction")) == 2
            if not automine:
                ctl.mine()
            assert int(ctl.call("eth_getTransactionCount", account.address, "latest"), 16) == (
                nonce + 1
            )
        ctl.set_automine(True)


def _signed(account: LocalAccount, *, nonce: int) -> bytes:
    signed = Account.sign_transaction(
        {
            "to": account.address,
            "value": 1,
            "gas": 21_000,
            "maxFeePerGas": 10**11,
            "maxPriorityFeePerGas": 10**9,
            "nonce": nonce,
            "chainId": 31337,
            "type": 2,
        },
        account.key,
    )
    return bytes(signed.raw_transaction)
