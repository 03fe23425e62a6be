"""The protocol tables against the published selectors, and the revert classes they give."""

from __future__ import annotations

import pytest
from eth_abi.abi import decode, encode
from eth_utils.crypto import keccak

from keeper.act.calls import classify_revert
from keeper.domain.dialects import Dialect, ErrorClass, arg_types, probe_calldata, selector
from keeper.domain.dialects_taskmarket import TASKMARKET, TASKMARKET_CURRENT, TASKMARKET_PRE7
from keeper.domain.model import Protocol
from keeper.domain.planner import Action, ActionKind
from keeper.domain.protocols import TABLES, all_dialects, classify_error, dialect_named


def err(signature: str) -> bytes:
    return keccak(text=signature)[:4]


def error_string(text: str) -> bytes:
    return err("Error(string)") + encode(["string"], [text])


class TestPublishedSelectors:
    """The selectors the upstream sources and the protocol notes publish."""

    @pytest.mark.parametrize(
        ("kind", "dialect", "published"),
        [
            (ActionKind.REFUND_EXPIRED, TASKMARKET_CURRENT, "3e91a36b"),
            (ActionKind.REFUND_EXPIRED, TASKMARKET_PRE7, "cc3e049b"),
            (ActionKind.FINALIZE_VERDICT, TASKMARKET_CURRENT, "d15c11c8"),
            (ActionKind.EVALUATOR_TIMEOUT, TASKMARKET_CURRENT, "a05e1635"),
        ],
    )
    def test_call_selectors(self, kind: ActionKind, dialect: Dialect, published: str) -> None:
        shape = dialect.call(kind)
        assert shape is not None and shape.selector.hex() == published

    def test_not_trusted_forwarder(self) -> None:
        rule = next(r for r in TASKMARKET.errors if r.signature == "NotTrustedForwarder()")
        assert rule.selector.hex() == "aa41dc9f"


class TestTaskMarketErrors:
    """Every upstream error the keeper meets has a class; none is 'unknown error'."""

    @pytest.mark.parametrize(
        ("signature", "klass"),
        [
            ("NotTrustedForwarder()", ErrorClass.NOT_PERMITTED),
            ("NotRequester()", ErrorClass.NOT_PERMITTED),
            ("NotInAppealingState()", ErrorClass.PREEMPTED),
            ("NotInReviewState()", ErrorClass.PREEMPTED),
            ("TaskAlreadyAccepted()", ErrorClass.PREEMPTED),
            ("TaskIsCancelled()", ErrorClass.PREEMPTED),
            ("TaskAlreadyRefunded()", ErrorClass.PREEMPTED),
            ("SubmissionsExist()", ErrorClass.PREEMPTED),
            ("TaskNotYetExpired()", ErrorClass.NOT_YET_DUE),
            ("AppealWindowStillOpen()", ErrorClass.NOT_YET_DUE),
            ("EvaluationWindowNotExpired()", ErrorClass.NOT_YET_DUE),
            ("EnforcedPause()", ErrorClass.PAUSED),
            ("NoVerdictIssued()", ErrorClass.OTHER),
            ("TaskDoesNotExist()", ErrorClass.OTHER),
        ],
    )
    def test_classified(self, signature: str, klass: ErrorClass) -> None:
        assert classify_error(err(signature), Protocol.TASKMARKET) == (klass, signature)

    def test_diamond_function_not_found(self) -> None:
        """The diamond's fallback for an unrouted selector is final for the keeper."""
        data = error_string("Diamond: function not found")
        assert classify_revert(data, Protocol.TASKMARKET) == (
            "not_permitted",
            "Error('Diamond: function not found')",
        )
        # any other Error(string) stays a plain revert
        assert classify_revert(error_string("nope"), Protocol.TASKMARKET)[0] == (
            "reverted_in_simulation"
        )
        # the same text under another error's selector is that other error, not this one
        other = selector("Refused(string)") + encode(["string"], ["Diamond: function not found"])
        assert classify_error(other, Protocol.TASKMARKET) is None

    @pytest.mark.parametrize(
        ("signature", "verdict", "reason"),
        [
            ("NotTrustedForwarder()", "not_permitted", "NotTrustedForwarder()"),
            ("TaskAlreadyRefunded()", "preempted", "TaskAlreadyRefunded()"),
            ("TaskNotYetExpired()", "reverted_in_simulation", "TaskNotYetExpired() (not_yet_due)"),
            ("EnforcedPause()", "reverted_in_simulation", "EnforcedPause() (paused)"),
        ],
    )
    def test_simulation_verdicts(self, signature: str, verdict: str, reason: str) -> None:
        """Final classes end the intent; the others are decided again later, class named."""
        assert classify_revert(err(signature), Protocol.TASKMARKET) == (verdict, reason)


class TestTables:
    def test_every_dialect_encodes_its_calls(self) -> None:
        """Each call shape yields selector + its arguments' ABI encoding (a head word each,
        plus a tail for ERC8183's empty ``bytes optParams``)."""
        for dialect in all_dialects():
            for kind, shape in dialect.calls.items():
                subject = "0x" + "ab" * 32 if shape.types[0] == "bytes32" else "9"
                data = dialect.encode(Action("0x" + "11" * 20, subject, kind, 0, dialect.protocol))
                assert data[:4] == selector(shape.signature)
                words = len(shape.types) + shape.types.count("bytes")  # + an empty tail's length
                assert len(data) == 4 + 32 * words, (dialect.name, kind)

    def test_dialects_are_told_apart(self) -> None:
        """Within a protocol no contract can match two dialects: of each pair, one lacks
        something the other requires."""
        for t in TABLES.values():
            for a in t.dialects:
                for b in t.dialects:
                    if a is not b:
                        apart = set(a.lacks) & set(b.requires) | set(b.lacks) & set(a.requires)
                        assert apart, (a.name, b.name)

    def test_probe_uses_an_impossible_id(self) -> None:
        """The first argument is all ones, the rest zero: nothing that exists is addressed."""
        data = probe_calldata("refundExpired(bytes32,uint256)")
        assert data[:4].hex() == "3e91a36b"
        task, agent = decode(list(arg_types("refundExpired(bytes32,uint256)")), data[4:])
        assert task == b"\xff" * 32 and agent == 0
        (job,) = decode(["uint256"], probe_calldata("claimRefund(uint256)")[4:])
        assert job == 2**256 - 1

    @pytest.mark.parametrize(
        ("signature", "first", "rest"),
        [
            (
                "f(uint256,uint8,int16,address,bool,bytes,string,bytes4)",
                2**256 - 1,
                (0, 0, "0x" + "00" * 20, False, b"", "", bytes(4)),
            ),
            ("g(uint8,bytes)", 255, (b"",)),
            ("h(bytes4,string)", b"\xff" * 4, ("",)),
            ("i(address,uint256)", "0x" + "00" * 20, (0,)),
        ],
    )
    def test_probe_arguments_of_every_kind(
        self, signature: str, first: object, rest: tuple[object, ...]
    ) -> None:
        """Each argument kind a probe may meet is encoded as eth_abi reads it back: the
        first at its type's top (ids), every other at zero or empty."""
        data = probe_calldata(signature)
        assert data[:4] == selector(signature)
        assert decode(list(arg_types(signature)), data[4:]) == (first, *rest)

    def test_an_argument_a_probe_cannot_fill_is_named(self) -> None:
        with pytest.raises(ValueError, match=r"f\(uint256\[\]\): cannot probe a uint256\[\]"):
            probe_calldata("f(uint256[])")

    def test_arg_types_keep_tuple_parameters_whole(self) -> None:
        """A tuple (or an array of tuples) is one parameter, whatever its commas."""
        cut = "diamondCut((address,uint8,bytes4[])[],address,bytes)"
        assert arg_types(cut) == ("(address,uint8,bytes4[])[]", "address", "bytes")
        assert arg_types("f((uint256,(bool,bytes)),uint8)") == ("(uint256,(bool,bytes))", "uint8")
        assert arg_types("paused()") == ()

    def test_unknown_dialect_lists_the_known(self) -> None:
        with pytest.raises(KeyError, match="known: TaskMarket, TaskMarketPre7"):
            dialect_named(Protocol.TASKMARKET, "Nope")

    def test_events_listed_per_protocol(self) -> None:
        names = {s.name for s in TASKMARKET.events}
        assert {"TaskCreated", "TaskExpired", "TaskReopened"} <= names
        assert all(s.protocol is Protocol.TASKMARKET for s in TASKMARKET.events)
