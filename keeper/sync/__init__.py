"""Following the chain: historical range scans below finality, per-block realtime above it.

The sync decides and yields (:mod:`keeper.sync.changes`); it never writes.
It may import ``keeper.rpc``, ``keeper.domain``, ``keeper.obs`` and
``keeper.errors``, and sees the index only through the read-only
``IndexView`` protocol it declares (tests/sync/test_sync_boundaries.py holds
it to that). The composition root (:mod:`keeper.indexing`) commits.
"""
