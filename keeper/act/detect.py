"""Find out which dialect each configured contract speaks, without sending: at start-up,
and again for a contract upgraded since (``keeper.act.dialect_watch``).

A diamond (EIP-2535) says which selectors it routes through its loupe,
``facetAddress(bytes4)`` (zero for an unrouted one); anything else is asked with
``eth_call`` probes that cannot change state (an id that cannot exist, see
``probe_calldata``): a function that exists reverts with data or returns, an unknown
selector reverts empty (or, behind a diamond's fallback, ``Error("Diamond: function not
found")``). The first dialect of the protocol's table whose ``requires`` all answer and
whose ``lacks`` all do not is the contract's dialect.

A pinned dialect (``[[contracts]] dialect``) is checked the same way and is a start-up
error when the contract does not answer it. A contract no dialect matches is still
indexed (by topic0); the keeper leaves it alone and says why, in status, the
``keeper_contract_dialect`` metric and one log line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from keeper.act.chain import ChainRpc
from keeper.config import ContractConfig
from keeper.domain.abi import decode
from keeper.domain.dialects import Dialect, probe_calldata, selector
from keeper.domain.dialects_taskmarket import DIAMOND_FUNCTION_NOT_FOUND
from keeper.domain.model import Protocol
from keeper.domain.planner import Action
from keeper.domain.protocols import dialect_named, table
from keeper.errors import FatalError
from keeper.obs.logging import get_logger
from keeper.obs.metrics import Metrics
from keeper.rpc.errors import ExecutionRevertedError
from keeper.store.db import Db
from keeper.store.dialects import record_dialects

__all__ = [
    "UNDETERMINED",
    "Detection",
    "DialectBook",
    "DialectMismatchError",
    "describe",
    "detect",
    "detect_all",
    "publish_dialects",
    "redetect",
]

log = get_logger(__name__)

UNDETERMINED: Final = "undetermined"  # the metric's dialect label when none matches
_FACET_ADDRESS: Final = selector("facetAddress(bytes4)")
_DIAMOND_VERSION: Final = selector("diamondVersion()")
_NOT_FOUND: Final = selector("Error(string)")


class DialectMismatchError(FatalError):
    """A pinned dialect the contract does not answer: refuse to start, naming it."""


@dataclass(frozen=True, slots=True)
class Detection:
    """What was found out about one configured contract."""

    name: str
    contract: str
    protocol: Protocol
    dialect: str | None  # None: undetermined, the keeper leaves the contract alone
    source: str  # "detected" | "pinned"
    diamond: bool
    revision: int | None  # a diamond's diamondVersion(), where it has one
    reason: str

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["protocol"] = self.protocol.value
        return out


@dataclass(frozen=True, slots=True)
class DialectBook:
    """The dialects in use, by contract address; how the keeper encodes every call."""

    detections: Mapping[str, Detection]

    def dialect(self, contract: str) -> Dialect | None:
        d = self.detections.get(contract)
        if d is None or d.dialect is None:
            return None
        return dialect_named(d.protocol, d.dialect)

    def callable(self, action: Action) -> bool:
        """Whether the keeper may encode ``action``: a known dialect that has the call."""
        dialect = self.dialect(action.contract)
        return dialect is not None and dialect.call(action.action) is not None

    def encode(self, action: Action) -> bytes:
        dialect = self.dialect(action.contract)
        if dialect is None:
            raise KeyError(f"no dialect known for {action.contract}")
        return dialect.encode(action)


class _Answers:
    """Which signatures one contract answers, each asked at most once."""

    def __init__(self, rpc: ChainRpc, address: str) -> None:
        self.rpc = rpc
        self.address = address
        self.diamond = False
        self._seen: dict[str, bool] = {}

    async def loupe(self, signature: str) -> bool | None:
        """Routed by the loupe (True/False), or None when there is no loupe."""
        word = selector(signature) + bytes(28)
        try:
            raw = await self.rpc.call(self.address, _FACET_ADDRESS + word, "latest")
        except ExecutionRevertedError:
            return None
        if len(raw) != 32 or raw[:12] != bytes(12):
            return None
        return raw != bytes(32)

    async def probe(self, signature: str) -> bool:
        try:
            await self.rpc.call(self.address, probe_calldata(signature), "latest")
        except ExecutionRevertedError as exc:
            data = exc.revert_data
            return data is not None and len(data) > 0 and not _is_not_found(data)
        return True

    async def answers(self, signature: str) -> bool:
        if signature not in self._seen:
            routed = await self.loupe(signature) if self.diamond else None
            self._seen[signature] = routed if routed is not None else await self.probe(signature)
        return self._seen[signature]

    async def revision(self) -> int | None:
        try:
            raw = await self.rpc.call(self.address, _DIAMOND_VERSION, "latest")
        except ExecutionRevertedError:
            return None
        return int.from_bytes(raw, "big") if len(raw) == 32 else None


def _is_not_found(data: bytes) -> bool:
    if data[:4] != _NOT_FOUND:
        return False
    try:
        (text,) = decode(["string"], data[4:])
    except Exception:  # malformed Error(string): some other revert
        return False
    return str(text) == DIAMOND_FUNCTION_NOT_FOUND


async def _mismatch(answers: _Answers, dialect: Dialect) -> list[str]:
    """Why ``dialect`` does not fit (empty: it does)."""
    out = [
        f"{sig} ({selector(sig).hex()}) not answered"
        for sig in dialect.requires
        if not await answers.answers(sig)
    ]
    out += [
        f"{sig} ({selector(sig).hex()}) answered, which {dialect.name} lacks"
        for sig in dialect.lacks
        if await answers.answers(sig)
    ]
    return out


async def detect(
    rpc: ChainRpc, contract: ContractConfig, *, wrong_pin_fatal: bool = True
) -> Detection:
    """The dialect of one configured contract (DialectMismatchError for a wrong pin; a
    pinned contract that stopped answering its pin, with ``wrong_pin_fatal`` off, is
    undetermined with the reason, so a running daemon leaves it alone)."""
    address = contract.address
    answers = _Answers(rpc, address)
    protocol_table = table(contract.protocol)
    first = protocol_table.dialects[0].requires[0]
    answers.diamond = await answers.loupe(first) is not None
    revision = await answers.revision() if answers.diamond else None
    how = "diamond loupe" if answers.diamond else "eth_call probes"

    def found(dialect: str | None, source: str, reason: str) -> Detection:
        return Detection(
            contract.name,
            address,
            contract.protocol,
            dialect,
            source,
            answers.diamond,
            revision,
            reason,
        )

    if contract.dialect:
        pinned = dialect_named(contract.protocol, contract.dialect)
        problems = await _mismatch(answers, pinned)
        if problems:
            why = (
                f"contracts {contract.name!r} at {address}: pinned dialect {pinned.name!r} "
                f"does not match the contract ({how}): {'; '.join(problems)}"
            )
            if wrong_pin_fatal:
                raise DialectMismatchError(why)
            return found(None, "pinned", why)
        return found(pinned.name, "pinned", f"pinned, confirmed by {how}")
    tried: list[str] = []
    for dialect in protocol_table.dialects:
        problems = await _mismatch(answers, dialect)
        if not problems:
            return found(dialect.name, "detected", f"detected by {how}")
        tried.append(f"{dialect.name}: {', '.join(problems)}")
    return found(None, "detected", f"no {contract.protocol.value} dialect matches ({how}): "
                 + "; ".join(tried))  # fmt: skip


async def detect_all(rpc: ChainRpc, contracts: Iterable[ContractConfig]) -> DialectBook:
    """Detect every configured contract; log one line per contract (a warning if none fits)."""
    found: dict[str, Detection] = {}
    for contract in contracts:
        d = await detect(rpc, contract)
        found[d.contract] = d
        _said(d)
    return DialectBook(found)


async def redetect(
    rpc: ChainRpc, book: DialectBook, contract: ContractConfig, upgrade_block: int | None
) -> DialectBook:
    """``book`` with ``contract`` detected again after an upgrade (at ``upgrade_block``;
    None: the upgrade seen before was rolled back); logs the change."""
    before = book.detections.get(contract.address)
    d = await detect(rpc, contract, wrong_pin_fatal=False)
    undetermined = (
        {"reason": d.reason, "effect": "the keeper leaves it alone"} if d.dialect is None else {}
    )
    # a warning when the calls change; the same dialect again (an upgrade of the code
    # behind the same interface, or history indexed after the start-up detection) is info
    same = before is not None and (before.dialect, before.revision) == (d.dialect, d.revision)
    (log.info if same else log.warning)(
        "contract_dialect_redetected",
        contract=d.name,
        address=d.contract,
        upgrade_block=upgrade_block,
        dialect=d.dialect,
        source=d.source,
        revision=d.revision,
        dialect_before=before.dialect if before is not None else None,
        revision_before=before.revision if before is not None else None,
        **undetermined,
    )
    return DialectBook({**book.detections, d.contract: d})


def _said(d: Detection) -> None:
    """The one log line of a detection."""
    if d.dialect is None:
        log.warning(
            "contract_dialect_undetermined",
            contract=d.name,
            address=d.contract,
            reason=d.reason,
            effect="indexed by topic0; the keeper leaves it alone",
        )
    else:
        log.info(
            "contract_dialect",
            contract=d.name,
            dialect=d.dialect,
            source=d.source,
            diamond=d.diamond,
            revision=d.revision,
        )


def describe(book: DialectBook) -> Sequence[dict[str, Any]]:
    """The detections as plain data, for status output."""
    return [d.as_dict() for d in book.detections.values()]


def publish_dialects(
    book: DialectBook,
    conn: Db,
    chain_id: int,
    metrics: Metrics | None,
    before: DialectBook | None = None,
) -> None:
    """Record the detections for ``keeper status`` and set ``keeper_contract_dialect``
    (a series of ``before`` that no longer holds is removed)."""
    record_dialects(conn, chain_id, describe(book))
    if metrics is None:
        return
    series = {
        (metrics.contract_label(d.contract), d.dialect or UNDETERMINED, d.source)
        for d in book.detections.values()
    }
    if before is not None:
        for d in before.detections.values():
            old = (metrics.contract_label(d.contract), d.dialect or UNDETERMINED, d.source)
            if old not in series:
                metrics.contract_dialect.remove(*old)
    for labels in series:
        metrics.contract_dialect.labels(*labels).set(1)
