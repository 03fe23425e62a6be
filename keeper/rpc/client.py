"""Typed Ethereum JSON-RPC methods on top of the retrying transport.

Every method returns validated, normalised values (ints, lowercase hex,
``BlockHeader``, ``Log``) so nothing above this layer parses hex. Block
references are an int, a tag (``latest``, ``finalized``, ``safe``...) or a
32-byte block hash; a hash is sent as an EIP-1898 ``{"blockHash": ...}``
object where the method allows one, so a read is pinned to the exact block a
decision was made on.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from keeper.domain.hashing import keccak
from keeper.domain.model import BlockHeader, Log, Logs
from keeper.domain.text import shown
from keeper.rpc.errors import AlreadyKnownError, NonceTooLowError, RpcError, TransientRpcError
from keeper.rpc.logs_reply import scan_logs_reply
from keeper.rpc.transport import JsonRpcTransport, log
from keeper.rpc.validate import (
    InvalidResponse,
    bloom_may_contain,
    data,
    gas,
    hash32,
    int64,
    parse_block,
    parse_fee_history,
    parse_receipt,
    quantity,
    validate_logs,
)

BlockRef = int | str

TAGS: Final = frozenset({"latest", "finalized", "safe", "earliest", "pending"})
_HASH: Final = re.compile(r"0x[0-9a-fA-F]{64}\Z")


@dataclass(frozen=True, slots=True)
class Sighting:
    """Our transactions as all endpoints see them (``RpcClient.seen_anywhere``)."""

    receipt: tuple[str, dict[str, Any]] | None  # (tx hash, its receipt), from any endpoint
    known: bool  # some endpoint knows one of them by hash (or holds its receipt)
    all_answered: bool  # no endpoint failed to answer


def is_block_hash(ref: BlockRef) -> bool:
    return isinstance(ref, str) and bool(_HASH.match(ref))


def block_param(ref: BlockRef, *, allow_hash: bool = True) -> str | dict[str, Any]:
    """The JSON-RPC block parameter for a reference (EIP-1898 object for a hash)."""
    if isinstance(ref, bool):
        raise TypeError("a block reference is an int, a tag or a block hash")
    if isinstance(ref, int):
        if ref < 0:
            raise ValueError("block number must not be negative")
        return hex(ref)
    if ref in TAGS:
        return ref
    if is_block_hash(ref):
        if not allow_hash:
            raise ValueError("this method takes a block number or tag, not a hash")
        return {"blockHash": ref.lower()}
    raise ValueError(f"not a block number, tag or hash: {shown(ref)}")


def _block_checker(ref: BlockRef) -> Callable[[Any], BlockHeader]:
    """A parser that also checks the node returned the block that was asked for."""

    def check(raw: Any) -> BlockHeader:
        header = parse_block(raw)
        if isinstance(ref, int) and header.number != ref:
            raise InvalidResponse(f"asked for block {ref}, got {header.number}")
        if is_block_hash(ref) and header.hash != str(ref).lower():
            raise InvalidResponse("asked for one block hash, got another")
        return header

    return check


def _address_list(addresses: Iterable[str]) -> list[str]:
    out = sorted({a.lower() for a in addresses})
    if not out:
        # An empty address filter means "every contract" to a node: never what we want.
        raise ValueError("get_logs needs at least one address")
    return out


def tx_hash_of(raw: bytes) -> str:
    """The hash of a signed transaction: keccak256 of its raw (typed or legacy) encoding."""
    return "0x" + keccak(raw).hex()


class RpcClient(JsonRpcTransport):
    """The daemon's Ethereum client: typed, validated calls over several endpoints."""

    async def __aenter__(self) -> RpcClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def chain_id(self) -> int:
        return int(await self.request("eth_chainId", [], parse=lambda r: quantity(r, "chainId")))

    async def block_number(self) -> int:
        return int(
            await self.request("eth_blockNumber", [], parse=lambda r: int64(r, "blockNumber"))
        )

    async def get_block(self, ref: BlockRef, *, must_exist: bool = False) -> BlockHeader | None:
        """A block header, or None when the node does not have it.

        ``must_exist`` (for a block known to exist, e.g. at or below a head
        already seen) turns a ``null`` into a fault of that endpoint, so a
        lagging replica is failed over instead of believed. ``latest`` always
        must exist.
        """
        found = await self._block_object(ref, must_exist=must_exist)
        return None if found is None else found[0]

    async def get_block_and_bloom(
        self, ref: BlockRef, *, must_exist: bool = False
    ) -> tuple[BlockHeader, str] | None:
        """A header with its ``logsBloom``, for ``get_logs_by_block_hash(..., bloom=)``."""
        return await self._block_object(ref, must_exist=must_exist)

    async def _block_object(
        self, ref: BlockRef, *, must_exist: bool
    ) -> tuple[BlockHeader, str] | None:
        param: str | dict[str, Any]
        if is_block_hash(ref):
            method, param = "eth_getBlockByHash", str(ref).lower()
        else:
            method, param = "eth_getBlockByNumber", block_param(ref, allow_hash=False)
        check = _block_checker(ref)

        def parse(raw: Any) -> tuple[BlockHeader, str]:
            header = check(raw)
            bloom = raw.get("logsBloom")
            if not isinstance(bloom, str):
                raise InvalidResponse("block: missing logsBloom")
            return header, bloom

        result: tuple[BlockHeader, str] | None = await self.request(
            method, [param, False], nullable=not must_exist and ref != "latest", parse=parse
        )
        return result

    async def get_blocks(
        self, numbers: Sequence[int], *, must_exist: bool = False
    ) -> list[BlockHeader | None]:
        """Headers for many block numbers in batches; None where a node lacks the block.

        ``must_exist`` retries a ``null`` item like a garbage one. Raises the
        first item error that survived the retries.
        """
        calls = [("eth_getBlockByNumber", [block_param(n), False]) for n in numbers]
        results = await self.batch(
            calls, nullable=not must_exist, parse_each=[_block_checker(n) for n in numbers]
        )
        out: list[BlockHeader | None] = []
        for item in results:
            if isinstance(item, RpcError):
                raise item
            out.append(item)
        return out

    async def get_logs(
        self,
        addresses: Iterable[str],
        from_block: int,
        to_block: int,
        *,
        topics: Sequence[Any] | None = None,
        max_bytes: int | None = None,
    ) -> Logs:
        """Logs of ``addresses`` in the inclusive range, validated and in chain order.

        A refused range raises ``RangeTooLargeError`` at once (no retry): the
        scanner shrinks the range, using the failure's hints. An answer longer
        than ``max_bytes`` is dropped before it is parsed (``AnswerTooLargeError``).
        """
        if from_block > to_block:
            raise ValueError("from_block must not exceed to_block")
        addrs = _address_list(addresses)
        flt: dict[str, Any] = {
            "address": addrs,
            "fromBlock": hex(from_block),
            "toBlock": hex(to_block),
        }
        if topics is not None:
            flt["topics"] = list(topics)
        result: Logs = await self.request(
            "eth_getLogs",
            [flt],
            parse=lambda r: validate_logs(
                r, addresses=addrs, from_block=from_block, to_block=to_block
            ),
            max_body=max_bytes,
            scan=lambda body, rid: scan_logs_reply(
                body, rid, addresses=addrs, from_block=from_block, to_block=to_block
            ),
        )
        return result

    async def get_logs_by_block_hash(
        self,
        addresses: Iterable[str],
        block_hash: str,
        *,
        topics: Sequence[Any] | None = None,
        bloom: str | None = None,
    ) -> list[Log]:
        """Logs of one block by hash: immune to the block being replaced mid-query.

        ``UnknownBlockError`` (after retries) means no endpoint knows the hash:
        it was reorged out, or every node lags. With the block's ``bloom``, an
        empty answer for a block whose bloom may hold one of our addresses is
        asked up to twice more, the second time elsewhere (a replica that has
        the header but not yet the receipts answers ``[]``); if the answers stay
        empty they are believed, since blooms give false positives.
        """
        addrs = _address_list(addresses)
        wanted = hash32(block_hash, "block_hash")
        flt: dict[str, Any] = {"address": addrs, "blockHash": wanted}
        if topics is not None:
            flt["topics"] = list(topics)
        result: Logs = await self.request(
            "eth_getLogs",
            [flt],
            parse=lambda r: validate_logs(r, addresses=addrs, block_hash=wanted),
            scan=lambda body, rid: scan_logs_reply(body, rid, addresses=addrs, block_hash=wanted),
        )
        if result or bloom is None:
            return result
        if not any(bloom_may_contain(bloom, bytes.fromhex(a[2:])) for a in addrs):
            return result

        def non_empty(r: Any) -> list[Log]:
            logs = validate_logs(r, addresses=addrs, block_hash=wanted)
            if not logs:
                raise InvalidResponse("no logs although the block bloom names our address")
            return logs

        try:
            confirmed: list[Log] = await self.request(
                "eth_getLogs", [flt], parse=non_empty, attempts=2
            )
        except TransientRpcError:
            log.info("empty_logs_despite_bloom", block_hash=wanted)
            return []
        return confirmed

    async def call(self, to: str, calldata: bytes, block: BlockRef = "latest") -> bytes:
        """``eth_call``; a revert raises ``ExecutionRevertedError`` carrying the revert data."""
        tx = {"to": to.lower(), "data": "0x" + calldata.hex()}
        result: bytes = await self.request(
            "eth_call", [tx, block_param(block)], parse=lambda r: data(r, "call")
        )
        return result

    async def get_code(self, address: str, block: BlockRef = "latest") -> bytes:
        """``eth_getCode``: the contract's runtime code, empty where none is deployed."""
        result: bytes = await self.request(
            "eth_getCode", [address.lower(), block_param(block)], parse=lambda r: data(r, "code")
        )
        return result

    async def estimate_gas(self, tx: Mapping[str, Any], block: BlockRef | None = None) -> int:
        params: list[Any] = [dict(tx)]
        if block is not None:
            params.append(block_param(block))
        return int(await self.request("eth_estimateGas", params, parse=lambda r: gas(r, "gas")))

    async def send_raw_transaction(self, raw: bytes) -> str:
        """Broadcast signed bytes; returns the transaction hash.

        Idempotent by construction: the hash is keccak of the bytes, so a retry
        after a lost reply that meets "already known", or "nonce too low"
        because the first attempt was already mined, still returns the hash
        once the node confirms it knows the transaction.
        """
        expected = tx_hash_of(raw)

        def check(r: Any) -> str:
            got = hash32(r, "txHash")
            if got != expected:
                raise InvalidResponse("node returned a hash that is not our transaction's")
            return got

        try:
            result: str = await self.request(
                "eth_sendRawTransaction", ["0x" + raw.hex()], parse=check
            )
            return result
        except AlreadyKnownError:
            return expected
        except NonceTooLowError:
            if await self.get_transaction_by_hash(expected) is not None:
                return expected
            raise

    async def get_transaction_receipt(self, tx_hash: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self.request(
            "eth_getTransactionReceipt",
            [hash32(tx_hash, "tx_hash")],
            nullable=True,
            parse=parse_receipt,
        )
        return result

    async def get_transaction_by_hash(self, tx_hash: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self.request(
            "eth_getTransactionByHash",
            [hash32(tx_hash, "tx_hash")],
            nullable=True,
            parse=_object("transaction"),
        )
        return result

    async def get_transaction_count(self, address: str, block: BlockRef = "pending") -> int:
        return int(
            await self.request(
                "eth_getTransactionCount",
                [address.lower(), block_param(block)],
                parse=lambda r: int64(r, "nonce"),
            )
        )

    async def get_balance(self, address: str, block: BlockRef = "latest") -> int:
        return int(
            await self.request(
                "eth_getBalance",
                [address.lower(), block_param(block)],
                parse=lambda r: quantity(r, "balance"),
            )
        )

    async def fee_history(
        self, blocks: int, newest: BlockRef, percentiles: Sequence[float]
    ) -> dict[str, Any]:
        """``eth_feeHistory`` as returned (hex strings), checked (``parse_fee_history``)."""
        result: dict[str, Any] = await self.request(
            "eth_feeHistory",
            [hex(blocks), block_param(newest, allow_hash=False), list(percentiles)],
            parse=parse_fee_history,
        )
        return result

    async def seen_anywhere(self, tx_hashes: Sequence[str]) -> Sighting:
        """What every endpoint says of our transactions: the first receipt any holds, whether
        any knows one of them, and whether every endpoint answered.

        One endpoint's ``null`` proves nothing (a load-balanced replica may lack a
        mined transaction), so an absence is only concluded when all agree.
        """
        checked = [hash32(h, "tx_hash") for h in tx_hashes]

        async def ask(name: str) -> tuple[tuple[str, dict[str, Any]] | None, bool, bool]:
            try:
                known = False
                for tx_hash in checked:
                    receipt = await self.request_at(
                        name, "eth_getTransactionReceipt", [tx_hash], nullable=True,
                        parse=parse_receipt,
                    )  # fmt: skip
                    if receipt is not None:
                        return (tx_hash, receipt), True, True
                    tx = await self.request_at(
                        name, "eth_getTransactionByHash", [tx_hash], nullable=True,
                        parse=_object("transaction"),
                    )  # fmt: skip
                    known = known or tx is not None
                return None, known, True
            except RpcError:
                return None, False, False

        answers = await asyncio.gather(*(ask(n) for n in self.endpoint_names))
        receipt = next((r for r, _, _ in answers if r is not None), None)
        return Sighting(
            receipt=receipt,
            known=any(k for _, k, _ in answers),
            all_answered=all(ok for _, _, ok in answers),
        )

    async def head_of_each(self) -> dict[str, int | None]:
        """Each endpoint's head block number (None if it failed): spots a lagging node.

        One attempt per endpoint, no failover, so the answer is really that node's.
        """

        async def head(name: str) -> int | None:
            try:
                return int(
                    await self.request_at(
                        name, "eth_blockNumber", [], parse=lambda r: int64(r, "blockNumber")
                    )
                )
            except RpcError:
                return None

        names = self.endpoint_names
        heads = await asyncio.gather(*(head(n) for n in names))
        return dict(zip(names, heads, strict=True))


def _object(what: str) -> Callable[[Any], dict[str, Any]]:
    def check(r: Any) -> dict[str, Any]:
        if not isinstance(r, dict):
            raise InvalidResponse(f"{what}: not an object")
        return r

    return check
