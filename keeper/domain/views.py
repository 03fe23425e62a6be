"""ABI encoding and decoding of the view calls the projections depend on.

Kept as explicit type strings (from the structs in the protocol specs) rather
than loaded from ABI files, so the daemon needs no devnet artifacts and a
deployed contract with extra functions still decodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from keeper.domain.abi import decode as abi_decode
from keeper.domain.hashing import keccak
from keeper.domain.model import ArgValue
from keeper.domain.view_words import Slicer, slicer_for


@dataclass(frozen=True, slots=True)
class ViewSpec:
    signature: str
    arg_types: tuple[str, ...]
    outputs: tuple[tuple[str, str], ...]  # (name, ABI type), in return order

    @property
    def selector(self) -> bytes:
        return keccak(text=self.signature)[:4]

    @property
    def output_type(self) -> str:
        return "(" + ",".join(t for _, t in self.outputs) + ")"


# getJob of the ERC8183.sol dialect: same selector, 13 fields in a new order (uint48 times,
# settled amount and payout receiver appended). decode_view("getJob") tells the two apart.
GET_JOB_ERC8183 = ViewSpec(
    "getJob(uint256)",
    ("uint256",),
    (
        ("client", "address"),
        ("status", "uint8"),
        ("provider", "address"),
        ("expiredAt", "uint48"),
        ("evaluator", "address"),
        ("submittedAt", "uint48"),
        ("budget", "uint256"),
        ("hook", "address"),
        ("paymentToken", "address"),
        ("providerAgentId", "uint256"),
        ("description", "string"),
        ("settledAmount", "uint256"),
        ("payoutReceiver", "address"),
    ),
)

VIEWS: Mapping[str, ViewSpec] = {
    "getJob": ViewSpec(
        "getJob(uint256)",
        ("uint256",),
        (
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
        ),
    ),
    "paymentToken": ViewSpec("paymentToken()", (), (("token", "address"),)),
    # revision 21 (14 fields; rev 14 appended stakeRequired, stakeBps). Not read by the
    # indexer, whose projections come from events: kept for tools that check a task.
    "getTask": ViewSpec(
        "getTask(bytes32)",
        ("bytes32",),
        (
            ("id", "bytes32"),
            ("requester", "address"),
            ("worker", "address"),
            ("status", "uint8"),
            ("mode", "bytes4"),
            ("reward", "uint256"),
            ("expiryTime", "uint256"),
            ("stakeAmount", "uint256"),
            ("feeBps", "uint16"),
            ("deliverable", "bytes32"),
            ("rating", "uint8"),
            ("hookContract", "address"),
            ("stakeRequired", "bool"),
            ("stakeBps", "uint16"),
        ),
    ),
    "getTaskEvaluatorConfig": ViewSpec(
        "getTaskEvaluatorConfig(bytes32)",
        ("bytes32",),
        (
            ("evaluator", "address"),
            ("evaluatorStake", "uint256"),
            ("evaluatorFeeBps", "uint16"),
            ("evaluationWindow", "uint32"),
            ("appealWindow", "uint32"),
            ("disputeResolver", "address"),
        ),
    ),
    "getTaskVerdict": ViewSpec(
        "getTaskVerdict(bytes32)",
        ("bytes32",),
        (
            ("issued", "bool"),
            ("verdictType", "uint8"),
            ("score", "uint16"),
            ("confidence", "uint16"),
            ("criteriaFlags", "bytes32[]"),
            ("evidenceHash", "bytes32"),
            ("awards", "(address,uint256,uint16)[]"),
        ),
    ),
}


_SELECTORS: Mapping[str, bytes] = {kind: spec.selector for kind, spec in VIEWS.items()}


def encode_view(kind: str, subject: str) -> bytes:
    """Calldata for view ``kind`` about ``subject`` (job id decimal, task id hex, or "").

    Every view takes at most one static word, so the encoding is written out
    directly: a backfill encodes one call per job created.
    """
    spec = VIEWS[kind]
    if not spec.arg_types:
        return _SELECTORS[kind]
    (typ,) = spec.arg_types
    if typ == "uint256":
        word = int(subject).to_bytes(32, "big")
    else:  # bytes32
        word = bytes.fromhex(subject.removeprefix("0x"))
        if len(word) != 32:
            raise ValueError(f"{kind}: a bytes32 argument needs 32 bytes, got {len(word)}")
    return _SELECTORS[kind] + word


def decode_view(kind: str, data: bytes) -> dict[str, ArgValue]:
    """Decode a view's return data into a flat mapping (raises on malformed data).

    ``getJob`` answers in one of two layouts (AgenticCommerce and legacy: 12
    fields, description 5th; ERC8183: 13 fields, description 11th). The string's
    head word tells them apart: it is the offset of the description's tail,
    always 12 words in the first layout, 13 in the second. Each layout is read
    by the word slicer (``keeper.domain.view_words``) and by eth_abi only when
    the slicer declines, so what is accepted and how it decodes is eth_abi's.
    """
    spec = _get_job_spec(data) if kind == "getJob" else VIEWS[kind]
    slicer = _SLICERS.get(spec.output_type)
    fast = slicer(data) if slicer is not None else None
    return fast if fast is not None else _abi_decode_view(spec, data)


def _abi_decode_view(spec: ViewSpec, data: bytes) -> dict[str, ArgValue]:
    (values,) = abi_decode([spec.output_type], data, strict=False)
    return {name: normalise(typ, v) for (name, typ), v in zip(spec.outputs, values, strict=True)}


_WORD = 32
_AC_DESCRIPTION_OFFSET = 12 * _WORD
_ERC8183_DESCRIPTION_OFFSET = 13 * _WORD


def _get_job_spec(data: bytes) -> ViewSpec:
    """The layout a getJob answer is in: ERC8183's only when its words say so."""
    if len(data) // _WORD < 15 or int.from_bytes(data[:_WORD], "big") != _WORD:
        return VIEWS["getJob"]
    if _word(data, 1 + 4) == _AC_DESCRIPTION_OFFSET:
        return VIEWS["getJob"]
    if _word(data, 1 + 10) != _ERC8183_DESCRIPTION_OFFSET:
        return VIEWS["getJob"]
    return GET_JOB_ERC8183


def _word(data: bytes, index: int) -> int:
    return int.from_bytes(data[index * _WORD : (index + 1) * _WORD], "big")


_SLICERS: Mapping[str, Slicer] = {
    spec.output_type: slicer
    for spec in (*VIEWS.values(), GET_JOB_ERC8183)
    if (slicer := slicer_for(spec.outputs)) is not None
}


def normalise(typ: str, value: object) -> ArgValue:
    """Bring an eth_abi value to our conventions, guided by its ABI type."""
    if typ.endswith("[]"):
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a sequence for {typ}")
        return tuple(normalise(typ[:-2], v) for v in value)
    if typ.startswith("("):
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a sequence for {typ}")
        parts = typ[1:-1].split(",")
        return tuple(normalise(t, v) for t, v in zip(parts, value, strict=True))
    if typ == "address":
        return str(value).lower()
    if typ.startswith("bytes"):
        if not isinstance(value, bytes):
            raise TypeError(f"expected bytes for {typ}")
        return "0x" + value.hex()
    if typ == "string":
        return str(value)
    if isinstance(value, bool | int):
        return value
    raise TypeError(f"unexpected ABI value for {typ}")
