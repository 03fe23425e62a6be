"""View reads grouped through Multicall3 ``aggregate3`` index exactly what lone eth_calls do.

The same chain (both protocols' traffic, and emitter jobs whose ``getJob``
reverts) is indexed three times: every read alone (no Multicall3 at the
configured address), grouped through the devnet's Multicall3, and grouped
through one deployed only after the traffic, so that the reads made at the
events' own blocks find no Multicall3 there. The three indexes are identical,
reverted reads included, and the grouped one sends far fewer eth_calls.

An answer garbled on its way (by a proxy that rewrites one read's answer, alone
or inside its aggregate) is asked again rather than recorded; bytes the node
gives every time are the contract's, and recorded as undecodable.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from support.rpc_proxy import RpcProxy
from sync_support import proxied_index, run_traffic, table_diff, traffic
from test_indexer_crash import bulk_events

from keeper.devnet.anvil import DEV_KEYS, AnvilProcess
from keeper.devnet.deploy import Deployment, connect, deploy_all, deploy_contract


@pytest.fixture
def deployed(anvil: AnvilProcess) -> Deployment:
    return deploy_all(anvil.url)


async def index(
    tmp: Path, name: str, url: str, deployed: Deployment, multicall: str, **chain: Any
) -> tuple[dict[str, list[tuple[Any, ...]]], list[Any]]:
    """A fresh index of the whole chain through a recording proxy: its tables and eth_calls."""
    async with proxied_index(tmp, name, url, deployed, multicall=multicall, **chain) as (h, proxy):
        dump = h.dump()
        # where each read came from (left out of dump(): it depends on the node)
        dump["sources"] = sorted(
            tuple(r)
            for r in h.conn.execute(
                "SELECT contract, subject, kind, block_number, source FROM chain_reads"
            )
        )
        return dump, proxy.requests_for("eth_call")


async def test_grouped_reads_index_what_lone_reads_index(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    await run_traffic(traffic(anvil.url, deployed), 8)
    await asyncio.to_thread(bulk_events, anvil.url, deployed, 4, 5)
    late = await asyncio.to_thread(deploy_contract, connect(anvil.url), DEV_KEYS[0], "Multicall3")

    alone, alone_calls = await index(tmp_path, "alone", anvil.url, deployed, "")
    grouped, grouped_calls = await index(
        tmp_path, "grouped", anvil.url, deployed, deployed.multicall
    )
    later, _ = await index(tmp_path, "late", anvil.url, deployed, late)

    assert table_diff(alone, grouped) == ""
    assert table_diff(alone, later) == ""
    results = [(r, json.loads(str(r[-1]))) for r in grouped["chain_reads"]]
    kinds = {row[3] for row, _ in results}
    assert {"getJob", "getTaskEvaluatorConfig", "getTaskVerdict"} <= kinds, kinds
    # the emitter's jobs have no getJob: reverted inside an aggregate, recorded as a lone call's
    assert any(res.get("error") == "reverted" for _, res in results)
    assert any("description" in res for _, res in results)

    grouped_aggregates = aggregates(grouped_calls, deployed.multicall.lower())
    assert grouped_aggregates, "no read went through Multicall3"
    assert aggregates(alone_calls, deployed.multicall.lower()) == []
    # alone: one eth_call a read. Grouped: the reads of a block in one aggregate; a read
    # that fails inside it (the emitter's 20 reverting getJob) is made again alone, once
    emitter = deployed.emitter.lower()
    lone = [p for p in grouped_calls if p[0]["to"] != deployed.multicall.lower()]
    assert len([p for p in lone if p[0]["to"] == emitter]) == 20
    escrow_reads = [p for p in alone_calls if p[0]["to"] != emitter]
    escrow_lone = [p for p in lone if p[0]["to"] != emitter]
    assert len(escrow_lone) + len(grouped_aggregates) < len(escrow_reads), (
        len(escrow_lone), len(grouped_aggregates), len(escrow_reads),
    )  # fmt: skip


async def test_an_aggregate_the_node_reverts_has_its_reads_made_alone(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """An aggregate that reverts as a whole (a node's gas cap, say) says nothing about its
    reads: each is made alone, and the index is the clean one."""
    await run_traffic(traffic(anvil.url, deployed), 4)
    clean, clean_calls = await index(tmp_path, "clean", anvil.url, deployed, deployed.multicall)
    multicall = deployed.multicall.lower()
    with RpcProxy(anvil.url) as faulty:
        faulty.rules.on(
            "eth_call", error=1, error_code=3, error_message="execution reverted", to=multicall
        )
        dump, calls = await index(tmp_path, "reverted", faulty.url, deployed, deployed.multicall)
        assert faulty.count("error", "eth_call") == 1  # the first aggregate
    # its reads were made alone: more lone calls than in the clean run, not another aggregate
    assert len(aggregates(calls, multicall)) == len(aggregates(clean_calls, multicall))
    assert len(calls) > len(clean_calls)
    assert table_diff(clean, dump) == ""


async def test_transient_failures_of_an_aggregate_are_retried(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """An aggregate the node fails transiently is sent again; the index is the clean one."""
    await run_traffic(traffic(anvil.url, deployed), 4)
    clean, clean_calls = await index(tmp_path, "clean", anvil.url, deployed, deployed.multicall)
    multicall = deployed.multicall.lower()
    with RpcProxy(anvil.url) as faulty:
        faulty.rules.on("eth_call", error=3, error_message="header not found", to=multicall)
        dump, calls = await index(tmp_path, "faulty", faulty.url, deployed, deployed.multicall)
        assert faulty.count("error", "eth_call") == 3  # the first three aggregates sent
    # each failed aggregate was sent again
    assert len(aggregates(calls, multicall)) >= len(aggregates(clean_calls, multicall)) + 3
    assert table_diff(clean, dump) == ""


class Garbler:
    """A proxy patch garbling the answers to one view call (``data`` to ``contract``, at
    any block): a lone eth_call's result, or its entry in an aggregate3 answer.
    ``answers`` are given in turn, then the true one (``always``: the last for good)."""

    def __init__(
        self, call: tuple[str, str], answers: Sequence[bytes], *, always: bool = False
    ) -> None:
        self.call = (call[0].lower(), call[1].lower())
        self.answers = list(answers)
        self.always = always
        self.given = 0  # garbled answers given
        self.aggregated = 0  # of them, inside an aggregate3 answer

    def __call__(self, params: list[Any], result: Any) -> Any:
        call = params[0]
        if (call["to"].lower(), call["data"].lower()) == self.call:
            return "0x" + self._next(bytes.fromhex(result[2:])).hex()
        if not call["data"].startswith(AGGREGATE3):
            return result
        (inner,) = abi_decode(["(address,bool,bytes)[]"], bytes.fromhex(call["data"][10:]))
        (results,) = abi_decode(["(bool,bytes)[]"], bytes.fromhex(result[2:]))
        out = []
        for (target, _, data), (ok, ret) in zip(inner, results, strict=True):
            if (target.lower(), "0x" + data.hex()) == self.call:
                given = self.given
                ret = self._next(ret)
                self.aggregated += self.given - given
            out.append((ok, ret))
        return "0x" + abi_encode(["(bool,bytes)[]"], [out]).hex()

    def _next(self, true: bytes) -> bytes:
        if self.given >= len(self.answers) and not self.always:
            return true
        answer = self.answers[min(self.given, len(self.answers) - 1)]
        self.given += 1
        return answer


AGGREGATE3 = "0x82ad56cb"  # aggregate3((address,bool,bytes)[])


def read_once(calls: list[Any], contract: str) -> tuple[str, str]:
    """A view call (address, data) made to ``contract`` once in the whole index."""
    counts = Counter(p[0]["data"] for p in calls if p[0]["to"] == contract)
    once = sorted(data for data, n in counts.items() if n == 1)
    assert once, f"every read of {contract} was made more than once: {counts}"
    return contract, once[0]


@dataclass
class Garbled:
    """An index made through a proxy garbling one read's answers, beside the clean one."""

    clean: dict[str, list[Any]]
    dump: dict[str, list[Any]]
    retries: int  # retryable failures its steps met
    garbler: Garbler


Garble = Callable[..., Awaitable[Garbled]]


@pytest.fixture(params=[False, True], ids=["alone", "grouped"])
async def garble(
    request: pytest.FixtureRequest, anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> Garble:
    """``garble(answers, always=...)``: the chain indexed clean (every read alone), then
    again, reads alone or grouped, through a proxy giving ``answers`` to a getJob call the
    clean index made once."""
    await run_traffic(traffic(anvil.url, deployed), 4)
    clean, calls = await index(tmp_path, "clean", anvil.url, deployed, "")
    target = read_once(calls, deployed.commerce.lower())
    multicall = deployed.multicall if request.param else ""

    async def run(answers: Sequence[bytes], *, always: bool = False) -> Garbled:
        garbler = Garbler(target, answers, always=always)
        with RpcProxy(anvil.url) as faulty:
            faulty.rules.on("eth_call", patched=10**9, patch=garbler)
            async with proxied_index(
                tmp_path, "garbled", faulty.url, deployed, multicall=multicall
            ) as (h, _):
                return Garbled(clean, h.dump(), h.retries, garbler)

    return run


async def test_an_answer_garbled_once_is_asked_again_not_recorded(garble: Garble) -> None:
    """One garbled answer (a truncating gateway) is no fact about the contract: the read
    is asked again and its true answer indexed, where it was kept as undecodable."""
    run = await garble([bytes.fromhex("1234")])
    assert run.garbler.given == 1
    assert table_diff(run.clean, run.dump) == ""


async def test_answers_that_never_agree_fail_the_batch_until_one_decodes(garble: Garble) -> None:
    """Undecodable answers that differ each time are the node's: the batch fails as a
    retryable fault, and is indexed whole once the node answers properly."""
    garbled = [bytes.fromhex("12" * n) for n in range(1, 7)]
    run = await garble(garbled)
    assert run.garbler.given == len(garbled)
    assert run.retries >= 1
    assert table_diff(run.clean, run.dump) == ""


async def test_an_answer_given_every_time_is_recorded_undecodable(garble: Garble) -> None:
    """A contract that answers a view with bytes of the wrong shape does so every time:
    that read alone is recorded as undecodable, and the batch is not failed for it."""
    run = await garble([bytes.fromhex("1234")], always=True)
    assert run.retries == 0
    # asked alone twice (after its aggregate's answer, where its block had other reads)
    assert run.garbler.given == 2 + run.garbler.aggregated
    assert table_diff({"events": run.clean["events"]}, {"events": run.dump["events"]}) == ""
    left = set(run.clean["chain_reads"]) - set(run.dump["chain_reads"])
    right = set(run.dump["chain_reads"]) - set(run.clean["chain_reads"])
    assert len(left) == len(right) == 1, table_diff(run.clean, run.dump)
    (read,) = right
    assert json.loads(str(read[-1]))["error"].startswith("undecodable: "), read


def aggregates(calls: list[Any], multicall: str) -> list[Any]:
    """The eth_calls that went through Multicall3."""
    return [p for p in calls if p[0]["to"] == multicall]
