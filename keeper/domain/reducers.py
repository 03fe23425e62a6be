"""Projections: one job or task folded from its events plus its pinned reads.

Pure and deterministic: the same events and reads give the same state, in any
input order (``chain_order`` sorts events by ``(block_number, log_index)``) and
whatever other subjects' events or reads are mixed in (they are filtered
out). That is what lets the store rebuild any subject, or all of them, after
a reorg or an upgrade and get byte-identical tables.

A read recorded as failed (result key ``error``, e.g. a reverted call) is
ignored. A read is used only when it was taken at the block of one of the
subject's own events (the description, which never changes, may come from any
earlier read of the same job). A read can therefore only change a projection
together with an event of that subject, and incremental and full rebuilds
agree.

Events are trusted over expectations: a status follows the last event, even
if a contract skipped a state we think it should have passed through.

The folds live in ``reduce_jobs`` and ``reduce_tasks``, over the inputs
``reducer_inputs`` prepares; this module is where the rest of the code gets them.
"""

from __future__ import annotations

from keeper.domain.reduce_jobs import reduce_job
from keeper.domain.reduce_tasks import reduce_task
from keeper.domain.reducer_inputs import ZERO_ADDRESS

__all__ = ["ZERO_ADDRESS", "reduce_job", "reduce_task"]
