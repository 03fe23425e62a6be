"""Benchmarks of the daemon (``make bench``): backfill, realtime, keeper, API, memory."""
