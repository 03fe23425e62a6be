"""Token metadata read from a real anvil: a real ERC-20 answers, code without decimals()
reverts, an address without code returns nothing; each token is read once, and an
RPC failure stores nothing so the token is asked again."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from support.rpc_proxy import RpcProxy

from keeper.devnet.anvil import DEV_KEYS, AnvilProcess
from keeper.devnet.deploy import connect as web3_connect
from keeper.devnet.deploy import deploy_contract
from keeper.domain.tokens import DECIMALS_CALL
from keeper.errors import RetryableError
from keeper.indexing import read_new_tokens
from keeper.rpc.client import RpcClient
from keeper.rpc.config import EndpointConfig
from keeper.store.db import connect
from keeper.store.tokens import TokenMeta, token_meta, tokens_to_read
from keeper.sync.tokens import read_token

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from api_world import CHAIN_ID, USDC, build_world

EOA = "0x" + "ee" * 20


@pytest.fixture(scope="module")
def tokens(module_anvil: AnvilProcess) -> dict[str, str]:
    w3 = web3_connect(module_anvil.url)
    return {
        "usdc": deploy_contract(w3, DEV_KEYS[0], "MockUSDC"),
        "multicall": deploy_contract(w3, DEV_KEYS[0], "Multicall3"),
    }


class TestReadToken:
    async def test_erc20_answers(self, module_anvil: AnvilProcess, tokens: dict[str, str]) -> None:
        async with RpcClient([EndpointConfig("anvil", module_anvil.url)]) as rpc:
            meta = await read_token(rpc, tokens["usdc"], await rpc.block_number())
        assert meta == TokenMeta(tokens["usdc"], 6, "USDC")

    @pytest.mark.parametrize("which", ["multicall", "eoa"])
    async def test_silent_contracts_stay_in_base_units(
        self, module_anvil: AnvilProcess, tokens: dict[str, str], which: str
    ) -> None:
        """A revert (no such function) and an empty answer (no code) both read as no answer."""
        address = tokens.get(which, EOA)
        async with RpcClient([EndpointConfig("anvil", module_anvil.url)]) as rpc:
            meta = await read_token(rpc, address, await rpc.block_number())
        assert meta == TokenMeta(address, None, None)


class Garbling:
    """A proxy patch giving ``answers`` in turn to ``token``'s ``decimals()``, then the
    true one."""

    def __init__(self, token: str, answers: list[str]) -> None:
        self.token = token.lower()
        self.answers = answers
        self.given = 0

    def __call__(self, params: list[Any], result: Any) -> Any:
        call = params[0]
        if call["to"].lower() != self.token or call["data"] != "0x" + DECIMALS_CALL.hex():
            return result
        if self.given == len(self.answers):
            return result
        self.given += 1
        return self.answers[self.given - 1]


class TestGarbledAnswers:
    """A garbled answer stored would leave the token unlabelled for good: an answer that
    does not decode is asked again, and only one the node gives twice is stored."""

    async def read(self, url: str, token: str, garbling: Garbling) -> TokenMeta:
        with RpcProxy(url) as proxy:
            proxy.rules.on("eth_call", patched=10**9, patch=garbling)
            async with RpcClient([EndpointConfig("proxy", proxy.url)]) as rpc:
                return await read_token(rpc, token, await rpc.block_number())

    async def test_one_garbled_answer_is_asked_again(
        self, module_anvil: AnvilProcess, tokens: dict[str, str]
    ) -> None:
        garbling = Garbling(tokens["usdc"], ["0x1234"])
        meta = await self.read(module_anvil.url, tokens["usdc"], garbling)
        assert garbling.given == 1
        assert meta == TokenMeta(tokens["usdc"], 6, "USDC")

    async def test_the_same_unreadable_answer_twice_is_the_tokens(
        self, module_anvil: AnvilProcess, tokens: dict[str, str]
    ) -> None:
        garbling = Garbling(tokens["usdc"], ["0x1234", "0x1234"])
        meta = await self.read(module_anvil.url, tokens["usdc"], garbling)
        assert garbling.given == 2  # asked again before it was taken
        assert meta == TokenMeta(tokens["usdc"], None, "USDC")

    async def test_two_unreadable_answers_that_differ_store_nothing(
        self, module_anvil: AnvilProcess, tokens: dict[str, str]
    ) -> None:
        garbling = Garbling(tokens["usdc"], ["0x1234", "0x" + "ff" * 32])
        with pytest.raises(RetryableError, match="twice, differently"):
            await self.read(module_anvil.url, tokens["usdc"], garbling)
        assert garbling.given == 2


class TestReadNewTokens:
    async def test_each_job_token_is_read_once(
        self, module_anvil: AnvilProcess, tmp_path: Path
    ) -> None:
        build_world(tmp_path / "keeper.db")
        conn = connect(tmp_path / "keeper.db")
        assert tokens_to_read(conn, CHAIN_ID) == [USDC]
        reader = connect(tmp_path / "keeper.db", readonly=True)  # the daemon's scan connection
        async with RpcClient([EndpointConfig("anvil", module_anvil.url)]) as rpc:
            assert await read_new_tokens(conn, rpc, CHAIN_ID, 1, reader) == 1
            assert await read_new_tokens(conn, rpc, CHAIN_ID, 2, reader) == 0
        reader.close()
        # the world's token address has no code on this chain: it did not answer
        assert token_meta(conn, CHAIN_ID) == {USDC: TokenMeta(USDC, None, None)}
        assert tokens_to_read(conn, CHAIN_ID) == []

    async def test_a_node_that_fails_stores_nothing(self, tmp_path: Path) -> None:
        """Node down: the read raises a retryable error and the token stays to be read."""
        build_world(tmp_path / "keeper.db")
        conn = connect(tmp_path / "keeper.db")
        dead = EndpointConfig("down", "http://127.0.0.1:9")  # discard port: refused
        async with RpcClient([dead], max_attempts=1) as rpc:
            with pytest.raises(RetryableError):
                await read_new_tokens(conn, rpc, CHAIN_ID, 1)
        assert token_meta(conn, CHAIN_ID) == {}
        assert tokens_to_read(conn, CHAIN_ID) == [USDC]


def test_decimals_call_is_the_erc20_selector() -> None:
    """The calldata is the 4-byte selector alone (what a node's eth_call receives)."""
    from keeper.domain.tokens import DECIMALS_CALL, SYMBOL_CALL

    assert DECIMALS_CALL.hex() == "313ce567"
    assert SYMBOL_CALL.hex() == "95d89b41"
