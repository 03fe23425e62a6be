"""Check JSON-RPC results before anything downstream trusts them.

A provider behind a load balancer can answer from a stale or broken replica:
a log whose block hash disagrees with its neighbours, a hex field that is
not hex, a block other than the one asked for. Each check here raises
``InvalidResponse``; the client counts that as a transient failure and asks
again, preferably elsewhere. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from itertools import pairwise
from typing import Any, Final, TypeVar

from keeper.domain.hashing import keccak
from keeper.domain.model import BlockHeader, Log, Logs

_QUANTITY: Final = re.compile(r"0x[0-9a-fA-F]{1,64}\Z")
_HASH: Final = re.compile(r"0x[0-9a-fA-F]{64}\Z")
_ADDRESS: Final = re.compile(r"0x[0-9a-fA-F]{40}\Z")


T = TypeVar("T")


class InvalidResponse(ValueError):
    """A result that is syntactically or semantically not what was asked for."""


def quantity(value: Any, what: str) -> int:
    """A JSON-RPC QUANTITY as int.

    Leading zeros are tolerated (some nodes emit ``0x00``); the empty ``0x``,
    non-hex and anything wider than 256 bits are not.
    """
    if isinstance(value, str) and _QUANTITY.match(value):
        return int(value, 16)
    raise InvalidResponse(f"{what}: not a hex quantity")


_INT64_MAX = 2**63 - 1


def int64(value: Any, what: str) -> int:
    """A QUANTITY the index keeps as a signed 64-bit integer: a block number, a block's
    timestamp, a log's or transaction's index.

    No chain is near 2**63 in any of them, and the store's integers end there: a
    node answering past it (a header's uint64 at its top, say) is answering wrong,
    and is asked again like any other bad answer, where the value would otherwise
    fail the commit.
    """
    number = quantity(value, what)
    if number > _INT64_MAX:
        raise InvalidResponse(f"{what}: {value} is past any chain's (2**63 - 1)")
    return number


def data(value: Any, what: str) -> bytes:
    """A JSON-RPC DATA field (even-length hex) as bytes.

    ``bytes.fromhex`` checks the digits (a regex took 37 ms on a 256 KB
    aggregate3 answer); the length check refuses the whitespace it skips.
    """
    if isinstance(value, str) and value[:2] == "0x":
        try:
            raw = bytes.fromhex(value[2:])
        except ValueError:
            pass
        else:
            if 2 * len(raw) + 2 == len(value):
                return raw
    raise InvalidResponse(f"{what}: not hex data")


def hash32(value: Any, what: str) -> str:
    """A 32-byte hash as lowercase ``0x`` hex."""
    if isinstance(value, str) and _HASH.match(value):
        return value.lower()
    raise InvalidResponse(f"{what}: not a 32-byte hash")


def address(value: Any, what: str) -> str:
    """A 20-byte address as lowercase ``0x`` hex."""
    if isinstance(value, str) and _ADDRESS.match(value):
        return value.lower()
    raise InvalidResponse(f"{what}: not an address")


def _field(obj: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in obj or obj[key] is None:
        raise InvalidResponse(f"{what}: missing {key}")
    return obj[key]


def parse_block(raw: Any) -> BlockHeader:
    """The header fields the indexer needs from an ``eth_getBlockBy*`` result."""
    if not isinstance(raw, Mapping):
        raise InvalidResponse("block: not an object")
    return BlockHeader(
        number=int64(_field(raw, "number", "block"), "block.number"),
        hash=hash32(_field(raw, "hash", "block"), "block.hash"),
        parent_hash=hash32(_field(raw, "parentHash", "block"), "block.parentHash"),
        timestamp=int64(_field(raw, "timestamp", "block"), "block.timestamp"),
    )


# gas is a uint64 by type, but no chain's block holds a thousandth of this
_MAX_GAS = 2**48


def gas(value: Any, what: str) -> int:
    """A gas amount (an estimate): past any block's gas limit is a wrong answer, which
    would otherwise be signed into a transaction no block can hold and stored."""
    number = quantity(value, what)
    if number > _MAX_GAS:
        raise InvalidResponse(f"{what}: {value} is past any block's gas limit (2**48)")
    return number


def parse_fee_history(raw: Any) -> dict[str, Any]:
    """An ``eth_feeHistory`` result, checked in what the fee policy reads of it: a
    non-empty ``baseFeePerGas`` list and each block's ``reward`` list, all quantities.
    A malformed one is a bad answer, asked again, not an error inside the keeper's
    fee decision (``keeper.domain.fees``)."""
    if not isinstance(raw, dict):
        raise InvalidResponse("feeHistory: not an object")
    fees = raw.get("baseFeePerGas")
    if not isinstance(fees, list) or not fees:
        raise InvalidResponse("feeHistory: no baseFeePerGas list")
    for fee in fees:
        quantity(fee, "feeHistory.baseFeePerGas[]")
    rewards = raw.get("reward", [])
    if rewards is None:
        return raw
    if not isinstance(rewards, list) or not all(isinstance(r, list) for r in rewards):
        raise InvalidResponse("feeHistory.reward: not a list of lists")
    for block in rewards:
        for reward in block:
            quantity(reward, "feeHistory.reward[][]")
    return raw


def parse_receipt(raw: Any) -> dict[str, Any]:
    """An ``eth_getTransactionReceipt`` result, checked in what the keeper reads of it.

    Where it landed (``blockNumber``, ``blockHash``), whether it succeeded
    (``status``: 0 or 1; absent before Byzantium) and its logs (objects with an
    address and topics): a node's malformed receipt is a bad answer, asked
    again, rather than an error inside the keeper's settlement.
    """
    if not isinstance(raw, dict):
        raise InvalidResponse("receipt: not an object")
    int64(_field(raw, "blockNumber", "receipt"), "receipt.blockNumber")
    hash32(_field(raw, "blockHash", "receipt"), "receipt.blockHash")
    if raw.get("status") is not None and quantity(raw["status"], "receipt.status") > 1:
        raise InvalidResponse("receipt.status: neither 0x0 nor 0x1")
    logs = raw.get("logs", [])
    if not isinstance(logs, list):
        raise InvalidResponse("receipt.logs: not a list")
    for entry in logs:
        if not isinstance(entry, dict):
            raise InvalidResponse("receipt.logs[]: not an object")
        address(_field(entry, "address", "receipt.logs[]"), "receipt.logs[].address")
        topics = _field(entry, "topics", "receipt.logs[]")
        if not isinstance(topics, list) or len(topics) > 4:
            raise InvalidResponse("receipt.logs[].topics: not a list of at most 4 hashes")
        for topic in topics:
            hash32(topic, "receipt.logs[].topics[]")
    return raw


class _Memo:
    """Values already validated in one response, by kind.

    A getLogs answer repeats the same block hash, transaction hash, address,
    topic0 and block number across many logs; checking each distinct string
    once (then a dict lookup) is most of what parsing a large answer costs.
    """

    __slots__ = ("_address", "_quantity", "hashes", "txs")

    def __init__(self) -> None:
        self.hashes: dict[str, str] = {}
        self._address: dict[str, str] = {}
        self._quantity: dict[str, int] = {}
        # raw transaction hash -> (its raw block number, block hash and index as the
        # first log had them, then the four checked values): _fast_log's reuse
        self.txs: dict[str, tuple[Any, Any, Any, int, str, str, int]] = {}

    def hash32(self, value: Any, what: str) -> str:
        return _checked(self.hashes, hash32, value, what)

    def address(self, value: Any, what: str) -> str:
        return _checked(self._address, address, value, what)

    def int64(self, value: Any, what: str) -> int:
        return _checked(self._quantity, int64, value, what)


def _checked(seen: dict[str, T], check: Callable[[Any, str], T], value: Any, what: str) -> T:
    if not isinstance(value, str):
        return check(value, what)  # raises: only strings pass any check
    found = seen.get(value)
    if found is None:
        found = seen[value] = check(value, what)
    return found


def parse_log(raw: Any, memo: _Memo | None = None) -> Log:
    """One ``eth_getLogs`` entry; a pending or removed log is refused."""
    if not isinstance(raw, Mapping):
        raise InvalidResponse("log: not an object")
    if raw.get("removed") is True:
        raise InvalidResponse("log: removed=true in a getLogs result")
    topics_raw = _field(raw, "topics", "log")
    if not isinstance(topics_raw, list) or len(topics_raw) > 4:
        raise InvalidResponse("log.topics: not a list of at most 4 hashes")
    m = memo or _Memo()
    return Log(
        address=m.address(_field(raw, "address", "log"), "log.address"),
        topics=tuple(m.hash32(t, "log.topics[]") for t in topics_raw),
        data=data(_field(raw, "data", "log"), "log.data"),
        block_number=m.int64(_field(raw, "blockNumber", "log"), "log.blockNumber"),
        block_hash=m.hash32(_field(raw, "blockHash", "log"), "log.blockHash"),
        tx_hash=m.hash32(_field(raw, "transactionHash", "log"), "log.transactionHash"),
        tx_index=m.int64(_field(raw, "transactionIndex", "log"), "log.transactionIndex"),
        log_index=int64(_field(raw, "logIndex", "log"), "log.logIndex"),
    )


def validate_logs(
    raw: Any,
    *,
    addresses: Iterable[str] | None = None,
    from_block: int | None = None,
    to_block: int | None = None,
    block_hash: str | None = None,
) -> Logs:
    """Parse a getLogs result and check it answers the query that was sent.

    Every log must lie in the requested range (or block), come from a
    requested address, agree with the other logs of its block on the block
    hash, and be unique by ``(block, logIndex)``. Returned in chain order,
    with the block timestamps the entries carried (``block_timestamps``).

    This is the hot path of historical sync, so each distinct string of an
    answer (block hash, address, topic, block number, log index) is checked
    once, and the per-block checks run once per block. A log the fast path
    cannot take as it is (a missing field, a non-string) goes through
    ``parse_log``, which names what is wrong.
    """
    if not isinstance(raw, list):
        raise InvalidResponse("logs: not a list")
    wanted = {a.lower() for a in addresses} if addresses is not None else None
    want_hash = block_hash.lower() if block_hash is not None else None
    memo = _Memo()
    hashes: dict[int, str] = {}
    stamps: dict[int, Any] = {}  # block -> the blockTimestamp of its first log
    logs = Logs()
    append = logs.append
    ordered = True
    last = (-1, -1)
    for item in raw:
        log = _fast_log(item, memo)
        if log is None:
            log = parse_log(item, memo)
        number, index = log.block_number, log.log_index
        known = hashes.get(number)
        if known is None:
            _check_block(number, log.block_hash, from_block, to_block, want_hash)
            hashes[number] = log.block_hash
            stamps[number] = item.get("blockTimestamp")  # a Mapping: parse_log took it
        elif known != log.block_hash:
            raise InvalidResponse(f"logs: two hashes for block {number}")
        if wanted is not None and log.address not in wanted:
            raise InvalidResponse("logs: a log from an address not asked for")
        if ordered and (number, index) <= last:
            ordered = False
        last = (number, index)
        append(log)
    if not ordered:
        logs.sort(key=lambda lg: (lg.block_number, lg.log_index))
        for a, b in pairwise(logs):
            if (a.block_number, a.log_index) == (b.block_number, b.log_index):
                raise InvalidResponse(f"logs: duplicate logIndex {b.log_index}")
    logs.timestamps = block_timestamps(stamps)
    return logs


def block_timestamps(raw: Mapping[int, Any]) -> dict[int, int]:
    """The blocks' timestamps as a getLogs answer's entries gave them (block -> raw
    ``blockTimestamp``), or none when the answer's cannot be believed.

    A block whose entry has no timestamp, or one that is not a quantity (``int64``), is
    left out: its header is read instead, as for a node that predates the field. A zero (a
    gateway that leaves the field at its default) or a timestamp below an earlier
    block's (chain time never goes back) discredits the whole answer.
    """
    out: dict[int, int] = {}
    last = 0
    for number in sorted(raw):
        try:
            stamp = int64(raw[number], "log.blockTimestamp")
        except InvalidResponse:
            continue
        if (stamp == 0 and number > 0) or stamp < last:
            return {}
        out[number] = last = stamp
    return out


def _check_block(
    number: int, hash_: str, from_block: int | None, to_block: int | None, want: str | None
) -> None:
    if from_block is not None and number < from_block:
        raise InvalidResponse("logs: a log below fromBlock")
    if to_block is not None and number > to_block:
        raise InvalidResponse("logs: a log above toBlock")
    if want is not None and hash_ != want:
        raise InvalidResponse("logs: a log from another block than the one asked for")


def _fast_log(item: Any, memo: _Memo) -> Log | None:
    """``parse_log`` for a well-formed entry, or None to let ``parse_log`` judge it.

    Same checks, fewer Python steps: the memo answers repeated strings, the
    block and transaction fields of a transaction's logs are checked once (its
    first log's raw strings are kept beside the checked values, and a later
    log reuses them only when its own raw strings are equal), and
    ``bytes.fromhex`` checks the data's digits (its length check below refuses
    the whitespace it would skip).
    """
    if type(item) is not dict or item.get("removed") is True:
        return None
    try:
        topics_raw = item["topics"]
        data_hex = item["data"]
        if type(topics_raw) is not list or len(topics_raw) > 4 or data_hex[:2] != "0x":
            return None
        payload = bytes.fromhex(data_hex[2:])
        if 2 * len(payload) + 2 != len(data_hex):
            return None
        raw_tx = item["transactionHash"]
        raw_number, raw_block, raw_index = (
            item["blockNumber"], item["blockHash"], item["transactionIndex"]
        )  # fmt: skip
        tx = memo.txs.get(raw_tx)
        if tx is None or tx[0] != raw_number or tx[1] != raw_block or tx[2] != raw_index:
            tx = memo.txs[raw_tx] = (
                raw_number, raw_block, raw_index,
                memo.int64(raw_number, "log.blockNumber"),
                memo.hash32(raw_block, "log.blockHash"),
                memo.hash32(raw_tx, "log.transactionHash"),
                memo.int64(raw_index, "log.transactionIndex"),
            )  # fmt: skip
        hashes = memo.hashes
        return Log(
            memo.address(item["address"], "log.address"),
            tuple([hashes.get(t) or memo.hash32(t, "log.topics[]") for t in topics_raw]),
            payload,
            tx[3],
            tx[4],
            tx[5],
            tx[6],
            memo.int64(item["logIndex"], "log.logIndex"),
        )
    except (KeyError, TypeError, ValueError):
        return None  # InvalidResponse is a ValueError: parse_log raises it again, named


def bloom_may_contain(bloom: str, item: bytes) -> bool:
    """Whether a block's 2048-bit ``logsBloom`` may hold ``item`` (an address or topic).

    False means certainly absent; True may be a false positive, which on busy
    blocks is common, so a True never proves that logs exist.
    """
    raw = data(bloom, "logsBloom")
    if len(raw) != 256:
        raise InvalidResponse("logsBloom: not 256 bytes")
    digest = keccak(item)
    for i in (0, 2, 4):
        bit = ((digest[i] << 8) | digest[i + 1]) & 2047
        if not raw[255 - bit // 8] & (1 << (bit % 8)):
            return False
    return True
