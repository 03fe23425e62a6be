"""Where each read is made: stable fields of final events at the finalized block, changing
fields only at the event's block; a node without state moves only stable reads to the head."""

from __future__ import annotations

from keeper.domain.reads import (
    EVENT_BLOCK,
    GET_JOB,
    GET_TASK_EVALUATOR_CONFIG,
    PAYMENT_TOKEN,
    ReadRequest,
    ViewCall,
    head_calls,
    plan_calls,
    stable_part,
)

ESCROW, MARKET = "0x" + "e1" * 20, "0x" + "7a" * 20
JOB_STABLE = ("id", "client", "evaluator", "description", "expiredAt")


def job(n: int, block: int) -> ReadRequest:
    return ReadRequest(ESCROW, str(n), GET_JOB, block, f"0x{block:064x}", JOB_STABLE)


def token(block: int) -> ReadRequest:
    return ReadRequest(ESCROW, "", PAYMENT_TOKEN, block, f"0x{block:064x}", ("token",))


def config(block: int) -> ReadRequest:
    return ReadRequest(
        MARKET, "0x" + "01" * 32, GET_TASK_EVALUATOR_CONFIG, block, f"0x{block:064x}"
    )


def test_final_stable_reads_go_to_the_finalized_block_others_stay() -> None:
    calls = plan_calls([job(1, 10), job(2, 95), config(10), config(95)], finalized=50)
    where = {(c.kind, c.answers[0].block_number): (c.block_number, c.source) for c in calls}
    assert where == {
        (GET_JOB, 10): (50, "finalized block 50"),
        (GET_JOB, 95): (95, EVENT_BLOCK),  # in the reorg window: at its own block
        (GET_TASK_EVALUATOR_CONFIG, 10): (10, EVENT_BLOCK),  # can change: never later
        (GET_TASK_EVALUATOR_CONFIG, 95): (95, EVENT_BLOCK),
    }


def test_one_contract_wide_value_is_read_once_for_every_block_below_finality() -> None:
    reads = [token(b) for b in (3, 7, 11, 60)]
    calls = plan_calls(reads, finalized=40)
    later = [c for c in calls if c.source != EVENT_BLOCK]
    assert len(later) == 1 and [r.block_number for r in later[0].answers] == [3, 7, 11]
    assert [c.block_number for c in calls if c.source == EVENT_BLOCK] == [60]


def test_without_state_stable_reads_move_to_the_head_and_the_rest_is_lost() -> None:
    failed = [
        ViewCall(ESCROW, GET_JOB, "1", 50, "finalized block 50", (job(1, 10),)),
        ViewCall(
            MARKET, GET_TASK_EVALUATOR_CONFIG, "0x" + "01" * 32, 10, EVENT_BLOCK, (config(10),)
        ),
        ViewCall(ESCROW, GET_JOB, "2", 99, "head block 99", (job(2, 20),)),
    ]
    retry, lost = head_calls(failed, head=99)
    assert [(c.subject, c.block_number, c.source) for c in retry] == [("1", 99, "head block 99")]
    # a changing field, and a read already made at the head, cannot be had
    assert [(c.kind, c.block_number) for c in lost] == [
        (GET_TASK_EVALUATOR_CONFIG, 10),
        (GET_JOB, 99),
    ]


def test_a_stable_read_records_only_its_stable_fields_wherever_it_was_read() -> None:
    answer = {"description": "d", "client": "0x" + "c1" * 20, "status": 3, "budget": 7}
    assert stable_part(job(1, 10), answer) == {"description": "d", "client": "0x" + "c1" * 20}
    assert stable_part(job(1, 10), {"error": "reverted"}) == {"error": "reverted"}
    assert stable_part(config(10), {"evaluatorStake": 5}) == {"evaluatorStake": 5}


def test_a_node_without_finalized_state_gets_final_stable_reads_at_the_head() -> None:
    calls = plan_calls([job(1, 10), config(10), job(2, 95)], finalized=50, head=99)
    where = {(c.kind, c.answers[0].block_number): (c.block_number, c.source) for c in calls}
    assert where == {
        (GET_JOB, 10): (99, "head block 99"),
        (GET_TASK_EVALUATOR_CONFIG, 10): (10, EVENT_BLOCK),
        (GET_JOB, 95): (95, EVENT_BLOCK),
    }


def test_finality_boundary_a_stable_read_at_the_finalized_block_is_final() -> None:
    """An event at exactly the finalized block is final: its stable read goes with the
    others to the finalized block; one block above stays at its own block."""
    calls = plan_calls([job(1, 49), job(2, 50), job(3, 51)], finalized=50)
    where = {c.subject: (c.block_number, c.source) for c in calls}
    assert where == {
        "1": (50, "finalized block 50"),
        "2": (50, "finalized block 50"),
        "3": (51, EVENT_BLOCK),
    }
