"""The event catalog and the fast decoder, checked against eth_abi and web3.py."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
from eth_abi.abi import encode
from hypothesis import given, settings
from hypothesis import strategies as st
from support.abi_events import encode_event
from web3 import Web3

from keeper.devnet.anvil import DEV_KEYS
from keeper.domain.event_catalog import (
    EVENTS,
    SPECS,
    TOPIC_TYPES,
    EventSpec,
    _by_layout,
    spec_for,
    topic0_of,
)
from keeper.domain.events import (
    _PLANS,
    _PLANS_BY_TOPIC_COUNT,
    _TOPIC_DECODERS,
    decode_log,
    decode_logs,
)
from keeper.domain.model import Log, Protocol

CONTRACT = "0x" + "ab" * 20
W3 = Web3()

# topic0 abbreviations as printed in PROTOCOLS.md: (signature, prefix, suffix). The
# document's suffix for legacy BudgetSet ("...68") is a typo: keccak gives "...8038",
# the prefix matches, so the suffix column holds the computed value there.
DOC_TOPICS = [
    ("JobCreated(uint256,address,address,address,uint256,address)", "b0f0239b", "79b9"),
    ("JobCreated(uint256,address,address,address,uint256)", "ef137df1", "2a0f"),
    ("ProviderSet(uint256,address,uint256)", "49d0adc1", "e7"),
    ("ProviderSet(uint256,address)", "9a87df07", "69"),
    ("BudgetSet(uint256,address,uint256)", "74f37e24", "cc"),
    ("BudgetSet(uint256,uint256)", "869e2577", "8038"),
    ("JobFunded(uint256,address,uint256)", "e3fbcc1e", "b3"),
    ("JobSubmitted(uint256,address,bytes32)", "80c17db7", "8e"),
    ("JobCompleted(uint256,address,bytes32)", "0fd54bd3", "44"),
    ("JobRejected(uint256,address,bytes32)", "ae7362b1", "75"),
    ("JobExpired(uint256)", "97237956", "32"),
    ("PaymentReleased(uint256,address,uint256)", "21d71db5", "b0"),
    ("PlatformFeePaid(uint256,address,uint256)", "0e61cfd0", "62"),
    ("EvaluatorFeePaid(uint256,address,uint256)", "253dd534", "61"),
    ("Refunded(uint256,address,uint256)", "7ca5472b", "c4"),
    ("TaskCreated(bytes32,address,uint256,bytes4,uint256,bool,uint16)", "e0dc4072", ""),
    ("TaskUpdated(bytes32,uint256,uint256)", "d1530ce5", ""),
    ("SubmissionRejected(bytes32,address)", "c60688aa", ""),
    ("TaskCreated(bytes32,address,uint256,bytes4,uint256)", "ee59b788", "b8"),
    ("TaskCreated(bytes32,address,uint256,uint256,bytes4)", "bdfc881a", "90"),
    ("TaskAccepted(bytes32,address,address,uint256,uint256)", "46c82fee", "97"),
    ("TaskClaimed(bytes32,address,uint256)", "0c94d586", "be"),
    ("TaskWorkerSelected(bytes32,address)", "8259e46a", "1e"),
    ("TaskSubmitted(bytes32,address,bytes32)", "7d30d188", "4b"),
    ("EvaluatorAssigned(bytes32,address,uint256)", "7d4a7c40", "9e"),
    ("TaskEvaluated(bytes32,address,uint8,uint16)", "52607bc8", "97"),
    ("TaskAppealed(bytes32,address)", "78e43e8c", "aa"),
    ("TaskDisputed(bytes32,address)", "1d8cbd42", "61"),
    ("EvaluatorTimedOut(bytes32,address,uint256)", "6995e4e2", "4a"),
    ("TaskCompleted(bytes32,address,address,uint256,uint256)", "0c01e82f", "cb"),
    ("TaskExpired(bytes32,address,uint256)", "e4ec5a16", "de"),
    ("TaskCancelled(bytes32,address,uint256)", "9954d682", "bc"),
    ("TaskReopened(bytes32)", "ae5c872b", "fa"),
    # the ERC8183.sol dialect (PROTOCOLS.md section 1b gives prefixes only)
    ("JobCreated(uint256,address,address,address,uint48,address)", "834a72f1", ""),
    ("ProviderSet(uint256,address,address,uint256)", "21f4f63d", ""),
    ("BudgetSet(uint256,address,address,uint256)", "e036e1e4", ""),
    ("PayoutReceiverSet(uint256,address,address)", "90e1fcf3", ""),
    ("ClaimSubmitted(uint256,address,uint256,uint256,bytes32,bytes)", "2fa4d424", ""),
    ("ClaimSettled(uint256,address,uint256,uint256,bytes32)", "deb90a7a", ""),
    ("ClaimApproved(uint256,address,uint256,uint256,bytes32)", "4ff0d1f3", ""),
    ("ClaimRejected(uint256,address,bytes32)", "8184e1fe", ""),
    ("Settled(uint256,uint256,uint256)", "321f57f4", ""),
    ("Disbursed(uint256,address,bytes4,uint256)", "76eaee28", ""),
    ("HookDetached(uint256,address)", "cde6a24b", ""),
    ("Paused(address)", "62e78cea", ""),
    ("Unpaused(address)", "5db9ee0a", ""),
]
# known but not needed by the keeper: recognised (never "unknown"), never projected
KNOWN_ONLY = [
    "HookWhitelistUpdated(address,bool)",
    "PaymentTokenAllowlistUpdated(address,bool)",
    "PlatformFeeUpdated(uint256,address)",
    "EvaluatorFeeUpdated(uint256)",
    "PlatformFeeSet(uint256,address)",  # AgenticCommerce's fee setters
    "EvaluatorFeeSet(uint256)",
    "EmergencyWithdraw(address,address,uint256)",
    "AuthorizationUsed(address,bytes32)",
    "IntentExecuted(address,bytes32)",
    "RoleGranted(bytes32,address,address)",
    "RoleRevoked(bytes32,address,address)",
    "RoleAdminChanged(bytes32,bytes32,bytes32)",
    "Upgraded(address)",
    "Initialized(uint64)",
    "EIP712DomainChanged()",
]
# task market events the keeper does not need: decoded and kept, moving no state
NOT_NEEDED = {
    "StakeForfeited", "StakeReturned", "TaskRated", "RequesterReputation", "SelfAward",
    "BidSubmitted", "AuctionAccepted", "PitchSubmitted", "ProofSubmitted", "HookRegistered",
    "HookCallFailed", "ForwarderUpdated", "FeesUpdated", "ReputationFeedbackFailed",
    "OwnershipTransferStarted",
    "FeeRecipientUpdated", "ReputationRegistryUpdated", "OwnershipTransferred",
    "MinAppealWindowUpdated",
}  # fmt: skip
# older layouts of not-needed task market events, kept beside the current one: (name, variant)
NOT_NEEDED_OLDER = [("ReputationRegistryUpdated", "older"), ("TaskRated", "older")]


def _strategy(typ: str) -> st.SearchStrategy[Any]:
    if typ.startswith("uint"):
        return st.integers(0, 2 ** int(typ[4:]) - 1)
    if typ == "address":
        return st.binary(min_size=20, max_size=20).map(lambda b: "0x" + b.hex())
    if typ == "bytes":
        return st.binary(max_size=100)
    if typ.startswith("bytes"):
        n = int(typ[5:])
        return st.binary(min_size=n, max_size=n)
    return st.booleans()


def _zero(typ: str) -> Any:
    """The smallest value of ``typ``: a valid argument that moves nothing else."""
    if typ == "address":
        return "0x" + "00" * 20
    if typ == "bytes":
        return b""
    if typ.startswith("bytes"):
        return bytes(int(typ[5:]))
    return False if typ == "bool" else 0


def _log(topics: tuple[str, ...], data: bytes, block: int = 7, index: int = 0) -> Log:
    return Log(
        address=CONTRACT,
        topics=topics,
        data=data,
        block_number=block,
        block_hash="0x" + f"{block:064x}",
        tx_hash="0x" + "11" * 32,
        tx_index=0,
        log_index=index,
    )


def _web3_args(spec: EventSpec, log: Log) -> dict[str, Any]:
    """Decode the same log with web3.py and normalise values to our conventions."""
    abi = {
        "type": "event",
        "name": spec.name,
        "anonymous": False,
        "inputs": [{"name": n, "type": t, "indexed": ix} for n, t, ix in spec.inputs],
    }
    contract = W3.eth.contract(abi=[abi])
    raw = {
        "address": Web3.to_checksum_address(log.address),
        "topics": [bytes.fromhex(t[2:]) for t in log.topics],
        "data": log.data,
        "blockNumber": log.block_number,
        "blockHash": bytes.fromhex(log.block_hash[2:]),
        "transactionHash": bytes.fromhex(log.tx_hash[2:]),
        "transactionIndex": log.tx_index,
        "logIndex": log.log_index,
    }
    decoded = contract.events[spec.name]().process_log(raw)
    out: dict[str, Any] = {}
    for key, value in decoded["args"].items():
        if isinstance(value, bytes):
            out[key] = "0x" + value.hex()
        elif isinstance(value, str):
            out[key] = value.lower()
        else:
            out[key] = value
    return out


class TestCatalog:
    def test_every_documented_event_is_known_with_its_topic0(self) -> None:
        """Each signature of PROTOCOLS.md hashes to the documented abbreviation and is in EVENTS."""
        by_signature = {s.signature: s for s in SPECS}
        for signature, prefix, suffix in DOC_TOPICS:
            spec = by_signature[signature]
            assert spec.topic0.startswith("0x" + prefix)
            assert spec.topic0.endswith(suffix)
            assert EVENTS[spec.protocol, spec.topic0, spec.n_topics] is spec
        for signature in KNOWN_ONLY:
            assert by_signature[signature].topic0 == topic0_of(signature)
            assert by_signature[signature].subject_arg == ""
        documented = {d[0] for d in DOC_TOPICS} | set(KNOWN_ONLY)
        rest = {s.name for s in SPECS if s.signature not in documented}
        assert rest == NOT_NEEDED
        for name, variant in NOT_NEEDED_OLDER:
            assert spec_for(name, variant).name in NOT_NEEDED
        # documented once and specified for each protocol: OpenZeppelin's pause events,
        # and the UUPS upgrade and initializer events (both protocols had UUPS proxies)
        both = {"Paused(address)", "Unpaused(address)", "Upgraded(address)", "Initialized(uint64)"}
        for signature in both:
            assert {s.protocol for s in SPECS if s.signature == signature} == set(Protocol)
        assert len(SPECS) == (
            len(DOC_TOPICS) + len(KNOWN_ONLY) + len(NOT_NEEDED) + len(NOT_NEEDED_OLDER) + len(both)
        )

    @pytest.mark.parametrize(
        ("inputs", "refused"),
        [
            ((("x", "uint8", True),), "an indexed uint8 has no topic decoder"),
            ((("x", "bool", True),), "an indexed bool has no topic decoder"),
            ((("x", "bytes", True),), "type bytes is not supported here"),
            ((("x", "string", False),), "type string is not supported here"),
        ],
    )
    def test_a_shape_the_decoder_cannot_read_is_refused(
        self, inputs: tuple[tuple[str, str, bool], ...], refused: str
    ) -> None:
        """A shape added to the catalog with a parameter the fast decoder has no reader
        for fails where it is declared, naming it, not at its first log."""
        signature = f"Odd({','.join(t for _, t, _ in inputs)})"
        with pytest.raises(ValueError, match=refused):
            EventSpec("Odd", signature, "v", Protocol.ERC8183, inputs, "")

    def test_the_topic_types_the_catalog_admits_are_those_the_decoder_reads(self) -> None:
        """The catalog's list and the decoder's table are kept in two modules (the
        decoder imports the catalog): one type added to only one of them fails here."""
        assert set(_TOPIC_DECODERS) == TOPIC_TYPES

    def test_variants_are_labelled(self) -> None:
        """Legacy ERC-8183 and older task-market shapes carry their variant label."""
        assert spec_for("JobCreated", "legacy").n_topics == 4
        assert spec_for("BudgetSet", "legacy").data_len == 32
        assert spec_for("ProviderSet", "legacy").data_len == 0
        assert spec_for("TaskCreated", "older").n_topics == 3
        assert spec_for("TaskAccepted", "older").protocol is Protocol.TASKMARKET
        assert spec_for("TaskCreated", "pre14").data_len == 64
        assert spec_for("TaskCreated").data_len == 128
        assert spec_for("JobCreated", "erc8183").inputs[4] == ("expiredAt", "uint48", False)
        assert spec_for("ClaimSubmitted", "erc8183").dynamic
        assert spec_for("ReputationRegistryUpdated").n_topics == 2
        assert spec_for("ReputationRegistryUpdated", "older").n_topics == 1
        assert spec_for("TaskRated", "older").data_len == 32
        assert spec_for("TaskRated", "older").topic0 != spec_for("TaskRated").topic0
        assert {s.variant for s in SPECS} == {"current", "erc8183", "legacy", "older", "pre14"}


def _declared(protocol: Protocol, declaration: str) -> EventSpec:
    """An event as upstream declares it (``Name(type [indexed] name, ...)``), as a spec
    of its own: a log encoded from it is built apart from the catalog's shape."""
    name, _, params = declaration.removesuffix(")").partition("(")
    inputs = tuple(
        (words[-1], words[0], "indexed" in words[1:-1])
        for words in (p.split() for p in params.split(",") if p.strip())
    )
    signature = f"{name}({','.join(t for _, t, _ in inputs)})"
    return EventSpec(name, signature, "upstream", protocol, inputs, "")


def _sample(typ: str, rng: random.Random) -> Any:
    """A value of ``typ`` for eth_abi, its extremes as likely as the rest."""
    if typ.startswith("uint"):
        bits = int(typ[4:])
        return rng.choice([0, 1, 2**bits - 1, rng.getrandbits(bits)])
    if typ == "address":
        return Web3.to_checksum_address(rng.randbytes(20))
    if typ == "bool":
        return rng.random() < 0.5
    return rng.randbytes(int(typ[5:]))


# Events as upstream declares them, with where (repository, path, commit): a log encoded
# from the declaration decodes to the catalog's shape of that variant.
UPSTREAM = [
    # daydreamsai/taskmarket-contracts src/interfaces/ITMPReputation.sol at 1c76e4f (as at
    # f930463 and 63efa9e); the diamond's AdminFacet emits it
    (Protocol.TASKMARKET, "ReputationRegistryUpdated(address indexed newRegistry)", "current"),
    # the same repository's monolithic src/TaskMarket.sol at 7469238: one topic0, unindexed
    (Protocol.TASKMARKET, "ReputationRegistryUpdated(address newRegistry)", "older"),
    # the same src/TaskMarket.sol at 7469238: the rating before raterAgentId (its own topic0)
    (
        Protocol.TASKMARKET,
        "TaskRated(bytes32 indexed taskId, address indexed worker, uint8 rating)",
        "older",
    ),
    # src/interfaces/ITMPCore.sol at 86ac821 (revision 18; as at efeffbc, revision 17's):
    # no parameter indexed
    (Protocol.TASKMARKET, "MinAppealWindowUpdated(uint32 minAppealWindowSecs)", "current"),
    # erc-8183/base-contracts contracts/AgenticCommerce.sol at 1767cd4 (the IERC8183Hook
    # version with submittedAt): its fee setters' events
    (Protocol.ERC8183, "PlatformFeeSet(uint256 feeBP, address indexed treasury)", "current"),
    (Protocol.ERC8183, "EvaluatorFeeSet(uint256 feeBP)", "current"),
]


@pytest.mark.parametrize(("protocol", "declaration", "variant"), UPSTREAM, ids=lambda v: str(v))
def test_upstream_declarations_decode(protocol: Protocol, declaration: str, variant: str) -> None:
    """Each published layout decodes, to its values in order, as web3.py reads them with
    upstream's ABI (the catalog's argument names may differ from upstream's)."""
    upstream = _declared(protocol, declaration)
    rng = random.Random(declaration)
    values = {name: _sample(typ, rng) for name, typ, _ in upstream.inputs}
    log = _log(*encode_event(upstream, values))
    event = decode_log(log, protocol, 0)
    assert (event.name, event.variant) == (upstream.name, variant)
    by_web3 = _web3_args(upstream, log)
    assert list(event.args.values()) == [by_web3[name] for name, _, _ in upstream.inputs]
    layout = [(t, ix) for _, t, ix in spec_for(upstream.name, variant).inputs]
    assert layout == [(t, ix) for _, t, ix in upstream.inputs]


class TestOneTopic0SeveralLayouts:
    """ReputationRegistryUpdated(address): unindexed in the monolithic task market, indexed
    on the diamond; one topic0, told apart by the number of topics."""

    CURRENT = spec_for("ReputationRegistryUpdated")
    OLDER = spec_for("ReputationRegistryUpdated", "older")
    REGISTRY = "0x" + "5a" * 20

    def test_the_number_of_topics_chooses_the_layout(self) -> None:
        """Each layout decodes to its own variant; a log of neither layout is unknown."""
        assert self.CURRENT.topic0 == self.OLDER.topic0
        for spec in (self.CURRENT, self.OLDER):
            topics, payload = encode_event(spec, {"registry": self.REGISTRY})
            event = decode_log(_log(topics, payload), Protocol.TASKMARKET, 0)
            assert (event.name, event.variant, event.subject, dict(event.args)) == (
                "ReputationRegistryUpdated",
                spec.variant,
                None,
                {"registry": self.REGISTRY},
            )
            assert decode_log(_log(topics, payload), Protocol.ERC8183, 0).name is None
        word = bytes(12) + bytes.fromhex(self.REGISTRY[2:])
        t0, t1 = self.CURRENT.topic0, "0x" + word.hex()
        neither = [((t0,), b""), ((t0, t1), word), ((t0, t1, t1), b""), ((t0,), word * 2)]
        for topics, data in neither:
            event = decode_log(_log(topics, data), Protocol.TASKMARKET, 0)
            assert (event.name, event.variant) == (None, "unknown")

    def test_only_shared_topic0s_are_looked_up_by_topic_count(self) -> None:
        """A topic0 of one layout is found by topic0 alone (the hot path's one lookup); the
        plans by topic count hold only topic0s of several layouts, and each spec is in
        exactly one of the two."""
        shared = {(p, t0) for p, t0, _ in _PLANS_BY_TOPIC_COUNT}
        assert shared == {(Protocol.TASKMARKET, self.CURRENT.topic0)}
        assert not shared & set(_PLANS)
        found = [spec for spec, _ in _PLANS.values()]
        found += [spec for spec, _ in _PLANS_BY_TOPIC_COUNT.values()]
        assert sorted(found, key=SPECS.index) == list(SPECS)

    def test_two_layouts_with_as_many_topics_are_refused(self) -> None:
        """Two layouts of one topic0 with one number of topics could not be told apart:
        the catalog refuses them where they are declared."""
        swapped = EventSpec(
            "Moved",
            "Moved(address,address)",
            "b",
            Protocol.TASKMARKET,
            (("a", "address", False), ("b", "address", True)),
            "",
        )
        first = replace(swapped, inputs=(("a", "address", True), ("b", "address", False)))
        assert _by_layout([first, self.CURRENT])
        with pytest.raises(RuntimeError, match=r"Moved.*2 topics each"):
            _by_layout([first, swapped])


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.name}-{s.variant}")
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_decoding_agrees_with_web3(spec: EventSpec, data: st.DataObject) -> None:
    """For random argument values, our decoder returns exactly what web3.py's process_log does."""
    values = {name: data.draw(_strategy(typ), label=name) for name, typ, _ in spec.inputs}
    topics, payload = encode_event(spec, values)
    log = _log(topics, payload)
    event = decode_log(log, spec.protocol, 1_700_000_000)
    assert event.name == spec.name
    assert event.variant == spec.variant
    assert dict(event.args) == _web3_args(spec, log)
    if not spec.subject_arg:  # a contract-level event (admin, forwarder): no subject
        assert event.subject is None
        return
    subject = event.args[spec.subject_arg]
    assert event.subject == (str(subject) if spec.protocol is Protocol.ERC8183 else subject)
    assert event.block_timestamp == 1_700_000_000


class TestMalformed:
    @settings(max_examples=300, deadline=None)
    @given(
        topics=st.lists(
            st.one_of(
                st.sampled_from([s.topic0 for s in SPECS]),
                st.binary(min_size=32, max_size=32).map(lambda b: "0x" + b.hex()),
                st.text(max_size=70),
            ),
            max_size=5,
        ),
        data=st.binary(max_size=200),
        protocol=st.sampled_from(list(Protocol)),
    )
    def test_random_logs_never_raise(
        self, topics: list[str], data: bytes, protocol: Protocol
    ) -> None:
        """Arbitrary topics and data decode to some event without raising."""
        event = decode_log(_log(tuple(topics), data), protocol, 0)
        assert (event.name is None) == (event.variant == "unknown")

    @pytest.mark.parametrize("delta", [-32, -1, 1, 32])
    def test_wrong_data_length_is_unknown(self, delta: int) -> None:
        """A data section one byte or one word off the spec's length is not decoded."""
        spec = spec_for("TaskCompleted")
        values = {
            "taskId": b"\x01" * 32,
            "requester": "0x" + "02" * 20,
            "worker": "0x" + "03" * 20,
            "workerPayment": 5,
            "platformFee": 1,
        }
        topics, payload = encode_event(spec, values)
        assert decode_log(_log(topics, payload), Protocol.TASKMARKET, 0).name == "TaskCompleted"
        bad = payload[:delta] if delta < 0 else payload + b"\x00" * delta
        event = decode_log(_log(topics, bad), Protocol.TASKMARKET, 0)
        assert (event.name, event.variant, event.subject, dict(event.args)) == (
            None,
            "unknown",
            None,
            {},
        )

    def test_wrong_topic_count_is_unknown(self) -> None:
        """A log with an extra or a missing indexed topic is not decoded."""
        spec = spec_for("JobFunded")
        topics, payload = encode_event(spec, {"jobId": 3, "client": "0x" + "aa" * 20, "amount": 9})
        assert decode_log(_log(topics[:-1], payload), Protocol.ERC8183, 0).name is None
        assert decode_log(_log((*topics, topics[-1]), payload), Protocol.ERC8183, 0).name is None

    def test_wrong_protocol_is_unknown(self) -> None:
        """A task-market event emitted by an ERC-8183 contract is not trusted."""
        spec = spec_for("TaskReopened")
        topics, payload = encode_event(spec, {"taskId": b"\x09" * 32})
        assert decode_log(_log(topics, payload), Protocol.TASKMARKET, 0).name == "TaskReopened"
        assert decode_log(_log(topics, payload), Protocol.ERC8183, 0).name is None

    def test_dirty_padding_and_out_of_range_values_are_unknown(self) -> None:
        """An address with high bits set, or a uint8 above 255, is not a valid encoding."""
        spec = spec_for("TaskEvaluated")
        topics, payload = encode_event(
            spec,
            {"taskId": b"\x01" * 32, "evaluator": "0x" + "04" * 20, "verdictType": 2, "score": 90},
        )
        assert decode_log(_log(topics, payload), Protocol.TASKMARKET, 0).args["verdictType"] == 2
        big_verdict = encode(["uint256", "uint16"], [256, 90])
        assert decode_log(_log(topics, big_verdict), Protocol.TASKMARKET, 0).name is None
        dirty = (*topics[:2], "0x01" + topics[2][4:])
        assert decode_log(_log(dirty, payload), Protocol.TASKMARKET, 0).name is None

    @pytest.mark.parametrize(
        ("spec", "slot"),
        [
            (spec, slot)
            for spec in SPECS
            for slot, (_, typ, _) in enumerate(spec.inputs)
            if typ == "bool" or (typ.startswith("uint") and typ != "uint256")
        ],
        ids=lambda v: v.signature if isinstance(v, EventSpec) else str(v),
    )
    def test_narrow_values_end_at_their_type(self, spec: EventSpec, slot: int) -> None:
        """Each bool and uintN below 256, in a topic or in the data, of every shape: its
        largest value decodes; one more (2 for a bool, 2**N) is not an encoding of it, so
        the log is unknown, as eth_abi refuses it."""
        name, typ, indexed = spec.inputs[slot]
        top = True if typ == "bool" else 2 ** int(typ[4:]) - 1
        values = {n: (top if n == name else _zero(t)) for n, t, _ in spec.inputs}
        topics, payload = encode_event(spec, values)
        assert decode_log(_log(topics, payload), spec.protocol, 0).args[name] == top
        past = (int(top) + 1).to_bytes(32, "big")
        if indexed:
            position = 1 + [n for n, _, i in spec.inputs if i].index(name)
            topics = (*topics[:position], "0x" + past.hex(), *topics[position + 1 :])
        else:
            offset = 32 * [n for n, _, i in spec.inputs if not i].index(name)
            payload = payload[:offset] + past + payload[offset + 32 :]
        assert decode_log(_log(topics, payload), spec.protocol, 0).name is None

    def test_uppercase_topics_are_normalised(self) -> None:
        """Checksum-cased hex in topics decodes to lowercase values."""
        spec = spec_for("JobExpired")
        topics, payload = encode_event(spec, {"jobId": 0xABC})
        upper = tuple("0x" + t[2:].upper() for t in topics)
        event = decode_log(_log(upper, payload), Protocol.ERC8183, 0)
        assert (event.name, event.subject) == ("JobExpired", str(0xABC))


class TestDecodeLogs:
    @settings(max_examples=50, deadline=None)
    @given(
        picks=st.lists(
            st.tuples(
                st.sampled_from(SPECS),
                st.sampled_from(["upper", "short", "not hex", "dropped", "empty", "twice"]),
            ),
            min_size=1,
            max_size=6,
        ),
        data=st.data(),
    )
    def test_a_batch_decodes_as_its_logs_do_one_by_one(
        self, picks: list[tuple[EventSpec, str]], data: st.DataObject
    ) -> None:
        """The batch's memo of checked topics changes nothing: each good log is followed by
        a copy with its topics cased, cut, not hex, one short or none, decoded as alone."""
        logs = []
        for spec, mangle in picks:
            values = {n: data.draw(_strategy(t), label=n) for n, t, _ in spec.inputs}
            topics, payload = encode_event(spec, values)
            bad = {
                "upper": tuple("0x" + t[2:].upper() for t in topics),
                "short": (*topics[:-1], topics[-1][:-2]),
                "not hex": (*topics[:-1], topics[-1][:-1] + "g"),
                "dropped": topics[:-1],
                "empty": (),
                "twice": topics,
            }[mangle]
            logs += [
                _log(topics, payload, index=len(logs)),
                _log(bad, payload, index=len(logs) + 1),
            ]
        protocol = picks[0][0].protocol
        alone = [decode_log(lg, protocol, 5) for lg in logs]
        assert decode_logs(logs, {CONTRACT: protocol}, {7: 5}) == alone
        assert alone[0].name == picks[0][0].name  # the comparison is not of unknowns only

    def test_batch_keeps_order_skips_foreign_and_uses_block_time(self) -> None:
        """Logs of unconfigured addresses are skipped; each event gets its block's timestamp."""
        spec = spec_for("JobExpired")
        logs = []
        for i in range(4):
            topics, payload = encode_event(spec, {"jobId": i})
            log = _log(topics, payload, block=10 + i // 2, index=i)
            if i == 2:
                log = replace(log, address="0x" + "cd" * 20)
            logs.append(log)
        unknown = _log((("0x" + "ee" * 32),), b"", block=11, index=9)
        events = decode_logs([*logs, unknown], {CONTRACT: Protocol.ERC8183}, {10: 100, 11: 110})
        assert [(e.subject, e.block_timestamp) for e in events] == [
            ("0", 100),
            ("1", 100),
            ("3", 110),
            (None, 110),
        ]
        with pytest.raises(KeyError):
            decode_logs(logs, {CONTRACT: Protocol.ERC8183}, {10: 100})


def _emitter_function(spec: EventSpec) -> str:
    """The devnet emitter function emitting this event shape (see ``_emitter_of``)."""
    if spec.variant == "legacy":
        return f"emitLegacy{spec.name}"
    if spec.variant == "older" and [s.name for s in SPECS].count(spec.name) > 1:
        return f"emitOlder{spec.name}"  # beside a later shape of its name
    if spec.variant == "pre14":
        return f"emitPre14{spec.name}"
    return f"emit{spec.name}"


def _raw_to_log(raw: Any) -> Log:
    """An eth_getLogs entry (web3 AttributeDict) in our normalised form."""
    return Log(
        address=str(raw["address"]).lower(),
        topics=tuple("0x" + bytes(t).hex() for t in raw["topics"]),
        data=bytes(raw["data"]),
        block_number=int(raw["blockNumber"]),
        block_hash="0x" + bytes(raw["blockHash"]).hex(),
        tx_hash="0x" + bytes(raw["transactionHash"]).hex(),
        tx_index=int(raw["transactionIndex"]),
        log_index=int(raw["logIndex"]),
    )


def _normalised(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in values.items():
        out[k] = "0x" + v.hex() if isinstance(v, bytes) else v.lower() if isinstance(v, str) else v
    return out


@pytest.fixture(scope="module")
def emitter(module_anvil: Any) -> Any:
    """The devnet EventEmitter deployed on a real anvil node."""
    from keeper.devnet.contracts import load_abi
    from keeper.devnet.deploy import connect, deploy_contract

    w3 = connect(module_anvil.url)
    address = deploy_contract(w3, DEV_KEYS[0], "EventEmitter")
    abi = load_abi("EventEmitter")
    return w3.eth.contract(address=Web3.to_checksum_address(address), abi=abi)


@pytest.fixture(scope="module")
def erc8183_emitter(emitter: Any) -> Any:
    """The ERC8183EventEmitter (the ERC8183.sol dialect's own shapes) on the same node."""
    from keeper.devnet.contracts import load_abi
    from keeper.devnet.deploy import deploy_contract

    address = deploy_contract(emitter.w3, DEV_KEYS[0], "ERC8183EventEmitter")
    abi = load_abi("ERC8183EventEmitter")
    return emitter.w3.eth.contract(address=Web3.to_checksum_address(address), abi=abi)


def _abi_signatures(contract: Any) -> set[str]:
    return {
        f"{e['name']}({','.join(i['type'] for i in e['inputs'])})"
        for e in contract.abi
        if e["type"] == "event"
    }


class TestRealChain:
    def _logs_of(self, emitter: Any, calls: list[Any]) -> list[Log]:
        from keeper.devnet.deploy import send_call

        w3 = emitter.w3
        start = w3.eth.block_number + 1
        for call in calls:
            send_call(w3, DEV_KEYS[0], call)
        query = {"address": emitter.address, "fromBlock": start, "toBlock": w3.eth.block_number}
        return [_raw_to_log(raw) for raw in w3.eth.get_logs(query)]

    @pytest.mark.parametrize("which", ["EventEmitter", "ERC8183EventEmitter"])
    def test_logs_emitted_on_anvil_decode_to_their_arguments(
        self, which: str, emitter: Any, erc8183_emitter: Any
    ) -> None:
        """Every event shape, emitted by a real contract on anvil, decodes to the values sent."""
        target = erc8183_emitter if which == "ERC8183EventEmitter" else emitter
        other = emitter if target is erc8183_emitter else erc8183_emitter
        mine = _abi_signatures(target) - _abi_signatures(other)
        if target is emitter:  # shapes both contracts declare are emitted by the older one
            specs = [s for s in SPECS if s.signature in _abi_signatures(emitter)]
        else:
            specs = [s for s in SPECS if s.signature in mine]
        rng = random.Random(8183)
        sent: list[tuple[EventSpec, dict[str, Any]]] = []
        for spec in specs:
            values: dict[str, Any] = {}
            for name, typ, _ in spec.inputs:
                if typ.startswith("uint"):
                    bits = int(typ[4:])
                    values[name] = rng.choice([0, 1, 2**bits - 1, rng.getrandbits(bits)])
                elif typ == "address":
                    values[name] = Web3.to_checksum_address(rng.randbytes(20))
                elif typ == "bytes":
                    values[name] = rng.randbytes(rng.choice([0, 1, 32, 33, 70]))
                elif typ == "bool":
                    values[name] = rng.random() < 0.5
                else:
                    values[name] = rng.randbytes(int(typ[5:]))
            sent.append((spec, values))
        fn = _emitter_function if target is emitter else (lambda s: f"emit{s.name}")
        calls = [getattr(target.functions, fn(s))(*v.values()) for s, v in sent]
        logs = self._logs_of(target, calls)
        assert len(logs) == len(specs) > 10
        for (spec, values), log in zip(sent, logs, strict=True):
            event = decode_log(log, spec.protocol, 0)
            assert (event.name, event.variant) == (spec.name, spec.variant)
            assert dict(event.args) == _normalised(values) == _web3_args(spec, log)

    def test_shapes_known_by_topic0_are_recognised_not_unknown(self, emitter: Any) -> None:
        """DefaultHooksSet(address[]) is known by topic0: named, no args, no subject."""
        logs = self._logs_of(emitter, [emitter.functions.emitDefaultHooksSet([emitter.address])])
        event = decode_log(logs[0], Protocol.TASKMARKET, 0)
        assert (event.name, event.variant, event.subject, dict(event.args)) == (
            "DefaultHooksSet",
            "recognised",
            None,
            {},
        )
        assert decode_log(logs[0], Protocol.ERC8183, 0).name is None  # another protocol's shape

    def test_the_minimum_appeal_window_is_decoded(self, emitter: Any) -> None:
        """MinAppealWindowUpdated(uint32) as ITMPCore declares it, unindexed, decodes to its
        value; the same topic0 with the value indexed is a layout never published: unknown."""
        fns = emitter.functions
        minimum = bytes.fromhex(topic0_of("MinAppealWindowUpdated(uint32)")[2:])
        logs = self._logs_of(emitter, [
            fns.emitMinAppealWindowUpdated(2**32 - 1),
            fns.emitRaw([minimum, (300).to_bytes(32, "big")], b""),
        ])  # fmt: skip
        events = [decode_log(log, Protocol.TASKMARKET, 0) for log in logs]
        assert [(e.name, e.variant, e.subject, dict(e.args)) for e in events] == [
            ("MinAppealWindowUpdated", "current", None, {"minAppealWindowSecs": 2**32 - 1}),
            (None, "unknown", None, {}),
        ]
        assert decode_log(logs[0], Protocol.ERC8183, 0).name is None  # another protocol's shape

    def test_both_layouts_of_one_topic0_from_a_real_contract(self, emitter: Any) -> None:
        """ReputationRegistryUpdated as the diamond emits it (indexed: two topics) and as
        the monolithic contract did (one topic, the address in the data) decode alike."""
        fns = emitter.functions
        registry = Web3.to_checksum_address("0x" + "5a" * 20)
        logs = self._logs_of(emitter, [
            fns.emitReputationRegistryUpdated(registry),
            fns.emitOlderReputationRegistryUpdated(registry),
        ])  # fmt: skip
        assert [len(log.topics) for log in logs] == [2, 1]
        assert logs[0].topics[0] == logs[1].topics[0]
        for log, variant in zip(logs, ["current", "older"], strict=True):
            event = decode_log(log, Protocol.TASKMARKET, 0)
            assert (event.name, event.variant, event.subject, dict(event.args)) == (
                "ReputationRegistryUpdated",
                variant,
                None,
                {"registry": registry.lower()},
            )

    def test_the_monolithic_rating_from_a_real_contract(self, emitter: Any) -> None:
        """TaskRated without raterAgentId (the contract before the diamond) decodes as a
        known task event, beside the four-argument shape."""
        fns = emitter.functions
        task, worker = b"\x07" * 32, Web3.to_checksum_address("0x" + "3c" * 20)
        logs = self._logs_of(emitter, [
            fns.emitOlderTaskRated(task, worker, 5),
            fns.emitTaskRated(task, worker, 5, 42),
        ])  # fmt: skip
        assert logs[0].topics[0] != logs[1].topics[0]
        events = [decode_log(log, Protocol.TASKMARKET, 0) for log in logs]
        args = {"taskId": "0x" + task.hex(), "worker": worker.lower(), "rating": 5}
        assert [(e.name, e.variant, e.subject, dict(e.args)) for e in events] == [
            ("TaskRated", "older", "0x" + task.hex(), args),
            ("TaskRated", "current", "0x" + task.hex(), {**args, "raterAgentId": 42}),
        ]

    def test_agentic_commerce_fee_settings_from_a_real_contract(self, emitter: Any) -> None:
        """AgenticCommerce's PlatformFeeSet and EvaluatorFeeSet decode as known
        contract-level events (not ERC8183.sol's PlatformFeeUpdated/EvaluatorFeeUpdated)."""
        fns = emitter.functions
        treasury = Web3.to_checksum_address("0x" + "7e" * 20)
        logs = self._logs_of(emitter, [
            fns.emitPlatformFeeSet(250, treasury),
            fns.emitEvaluatorFeeSet(100),
        ])  # fmt: skip
        events = [decode_log(log, Protocol.ERC8183, 0) for log in logs]
        assert [(e.name, e.variant, e.subject, dict(e.args)) for e in events] == [
            ("PlatformFeeSet", "current", None, {"feeBP": 250, "treasury": treasury.lower()}),
            ("EvaluatorFeeSet", "current", None, {"feeBP": 100}),
        ]
        assert [decode_log(log, Protocol.TASKMARKET, 0).name for log in logs] == [None, None]

    def test_every_spec_is_emitted_by_one_of_the_emitters(
        self, emitter: Any, erc8183_emitter: Any
    ) -> None:
        """The two devnet emitters together cover the whole catalog."""
        covered = _abi_signatures(emitter) | _abi_signatures(erc8183_emitter)
        assert {s.signature for s in SPECS} <= covered

    def test_noise_from_a_real_contract_is_unknown(self, emitter: Any) -> None:
        """Foreign events, a later TaskCreated shape and a malformed known topic0 are unknown."""
        created = bytes.fromhex(spec_for("TaskCreated").topic0[2:])
        later_sig = "TaskCreated(bytes32,address,uint256,bytes4,uint256,uint256)"
        later = bytes.fromhex(topic0_of(later_sig)[2:])
        indexed = [b"\x01" * 32, b"\x02" * 32, b"\x03" * 32]
        fns = emitter.functions
        logs = self._logs_of(
            emitter,
            [
                fns.emitMystery(7, b"hello"),
                fns.emitRaw([later, *indexed], b"\x00" * 96),
                fns.emitRaw([created, *indexed], b"\x00" * 33),
                fns.emitRaw([], b""),
            ],
        )
        assert len(logs) == 4
        for log in logs:
            event = decode_log(log, Protocol.TASKMARKET, 0)
            assert (event.name, event.variant, event.subject) == (None, "unknown", None)


class TestDynamicBytes:
    """ClaimSubmitted's trailing ``bytes``: canonical tails decode, anything else is unknown."""

    SPEC = spec_for("ClaimSubmitted", "erc8183")

    def _claim(self, opt: bytes) -> tuple[tuple[str, ...], bytes]:
        values = {
            "jobId": 4,
            "provider": "0x" + "0a" * 20,
            "cumulativeAmount": 7,
            "delta": 3,
            "deliverable": b"\x05" * 32,
            "optParams": opt,
        }
        return encode_event(self.SPEC, values)

    @pytest.mark.parametrize("opt", [b"", b"\x01", b"\xff" * 32, b"\x02" * 33])
    def test_canonical_tails_decode(self, opt: bytes) -> None:
        """Empty, short, word-sized and longer payloads round-trip."""
        topics, payload = self._claim(opt)
        event = decode_log(_log(topics, payload), Protocol.ERC8183, 0)
        assert event.args["optParams"] == "0x" + opt.hex()
        assert event.subject == "4"

    def test_non_canonical_tails_are_unknown(self) -> None:
        """A moved or wrong offset, dirty padding, a short or an over-long tail: all unknown,
        no raise."""
        topics, payload = self._claim(b"\x01\x02")
        head = self.SPEC.data_len
        moved = payload[: head - 32] + (head + 32).to_bytes(32, "big") + payload[head:] + bytes(32)
        dirty = payload[:-1] + b"\x01"
        huge = payload[:head] + (2**255).to_bytes(32, "big") + payload[head + 32 :]
        # the data just as long, its offset word naming another place than the tail's
        elsewhere = [
            payload[: head - 32] + at.to_bytes(32, "big") + payload[head:] for at in (0, 32)
        ]
        for bad in (
            moved,
            dirty,
            payload[:-32],
            payload + bytes(32),
            huge,
            payload[:head],
            *elsewhere,
        ):
            assert decode_log(_log(topics, bad), Protocol.ERC8183, 0).name is None

    @settings(max_examples=200, deadline=None)
    @given(opt=st.binary(max_size=90), cut=st.integers(0, 200), flip=st.integers(0, 400))
    def test_mangled_claims_never_raise(self, opt: bytes, cut: int, flip: int) -> None:
        """Truncated or bit-flipped claim logs decode to a claim or to unknown, never raise."""
        topics, payload = self._claim(opt)
        data = bytearray(payload[: len(payload) - min(cut, len(payload))])
        if data:
            data[flip % len(data)] ^= 0x80
        event = decode_log(_log(topics, bytes(data)), Protocol.ERC8183, 0)
        assert event.name in (None, "ClaimSubmitted")
