"""The devnet's traffic at test speed: 40 chain seconds a step, a step every 20 ms.

Deadlines short enough that every scenario's keeper action falls due within a
few seconds of wall time; the appeal window is the Task Market's minimum or
more (the diamond refuses less).
"""

from __future__ import annotations

from keeper.devnet.traffic import Timing

FAST = Timing(
    interval=0.02, warp=40, job_ttl=160, task_ttl=160, evaluation_window=80, appeal_window=320
)
