"""Which Disputed tasks the keeper probes for a silent resolution, and what it records
(keeper.act.silent): pure decisions, no chain."""

from __future__ import annotations

from dataclasses import replace

import eth_abi

from keeper.act.silent import RESOLVE_PROBE, disputes_to_probe, silent_resolutions
from keeper.domain.dialects import selector
from keeper.domain.model import BlockHeader, TaskState, TaskStatus
from keeper.domain.reads import READ_KINDS, RESOLVE_SILENT

MARKET = "0x" + "aa" * 20
PAUSED = "0x" + "bb" * 20
RESOLVER = "0x" + "cc" * 20


def _task(n: int, *, contract: str = MARKET, resolver: str | None = RESOLVER,
          status: TaskStatus = TaskStatus.DISPUTED) -> TaskState:  # fmt: skip
    return TaskState(
        contract=contract,
        task_id="0x" + f"{n:064x}",
        status=status,
        dispute_resolver=resolver,
    )


def _ids(tasks: list[TaskState]) -> list[str]:
    return [t.task_id for t in tasks]


class TestDisputesToProbe:
    def test_only_disputed_tasks_with_a_resolver_on_a_contract_not_skipped(self) -> None:
        """Appealed without a resolver, a task can never be resolved; a paused contract
        answers EnforcedPause to everything; any other status has an event to leave it."""
        tasks = [
            _task(1),
            _task(2, resolver=None),
            _task(3, contract=PAUSED),
            _task(4, status=TaskStatus.APPEALING),
            _task(5, status=TaskStatus.ACCEPTED),
        ]
        probes = disputes_to_probe(tasks, 100, {}, 5, skip={PAUSED})
        assert _ids(probes.due) == [_task(1).task_id]
        assert probes.probed == {(MARKET, _task(1).task_id): 100}

    def test_each_task_at_most_once_every_few_blocks(self) -> None:
        tasks = [_task(1), _task(2)]
        first = disputes_to_probe(tasks, 100, {}, 5)
        assert len(first.due) == 2
        probed = first.probed
        for head in range(101, 105):
            step = disputes_to_probe(tasks, head, probed, 5)
            assert (step.due, step.probed) == ([], probed)
        again = disputes_to_probe(tasks, 105, probed, 5)
        assert _ids(again.due) == _ids(tasks)
        assert set(again.probed.values()) == {105}

    def test_a_task_that_left_disputed_is_forgotten(self) -> None:
        """The memory follows what the index has Disputed: bounded, and a task that
        settled (or the index rolled back out of Disputed) is not remembered."""
        probed = disputes_to_probe([_task(1), _task(2)], 100, {}, 5).probed
        settled = replace(_task(2), status=TaskStatus.ACCEPTED)
        later = disputes_to_probe([_task(1), settled], 102, probed, 5)
        assert (later.due, later.probed) == ([], {(MARKET, _task(1).task_id): 100})

    def test_a_task_changed_after_the_head_waits_for_a_later_head(self) -> None:
        """The index moved on while the tick ran: at ``head`` the task may not be Disputed
        yet, and the probe would answer NotInDisputedState all the same."""
        task = replace(_task(1), updated_block=101)
        early = disputes_to_probe([task], 100, {}, 5)
        assert (early.due, early.probed) == ([], {})
        assert _ids(disputes_to_probe([task], 101, {}, 5).due) == [task.task_id]

    def test_a_skipped_contract_keeps_its_memory_and_is_probed_once_back(self) -> None:
        probed = disputes_to_probe([_task(1, contract=PAUSED)], 100, {}, 5).probed
        paused = disputes_to_probe([_task(1, contract=PAUSED)], 107, probed, 5, skip={PAUSED})
        assert (paused.due, paused.probed) == ([], probed)
        back = disputes_to_probe([_task(1, contract=PAUSED)], 108, paused.probed, 5)
        assert len(back.due) == 1


class TestSilentResolutions:
    HEAD = BlockHeader(number=42, hash="0x" + "42" * 32, parent_hash="0x" + "41" * 32,
                       timestamp=1_000)  # fmt: skip

    def test_only_not_in_disputed_state_is_an_observation(self) -> None:
        """NotInDisputedState: no longer Disputed at the head; any other answer (the
        resolver check, AwardsRequired, a pause, success, no data) says nothing."""
        gone, kept, other, ok, empty = (_task(n) for n in range(1, 6))
        answers = [
            (gone, selector("NotInDisputedState()")),
            (kept, selector("NotDisputeResolver()")),
            (other, selector("AwardsRequired()")),
            (ok, None),
            (empty, b""),
        ]
        [read] = silent_resolutions(answers, self.HEAD)
        assert (read.contract, read.subject, read.kind) == (MARKET, gone.task_id, RESOLVE_SILENT)
        assert (read.block_number, read.block_hash) == (42, self.HEAD.hash)
        assert read.result == {"refused": "NotInDisputedState"}

    def test_the_observation_is_never_replayed_as_a_view_call(self) -> None:
        assert RESOLVE_SILENT not in READ_KINDS

    def test_the_probe_is_resolve_dispute_with_a_non_reject_verdict_and_no_awards(self) -> None:
        task = _task(7)
        data = RESOLVE_PROBE.encode(task.task_id)
        assert data[:4] == selector("resolveDispute(bytes32,uint8,(address,uint256,uint16)[])")
        decoded = eth_abi.decode(["bytes32", "uint8", "(address,uint256,uint16)[]"], data[4:])
        assert decoded == (bytes.fromhex(task.task_id[2:]), 0, ())
