"""How the long-running processes (the daemon, ``keeper backfill``, the fetch process) use
the interpreter's collector, its recursion limit and the C allocator.

The collector's and the allocator's settings trade nothing the indexer needs
for memory or CPU it would otherwise lose (bench/README.md has what each one
moved); the recursion limit is there for hostile input (``tune_recursion``).
"""

from __future__ import annotations

import ctypes
import gc
import sys

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# blocks this large or larger get pages of their own, given back when freed
LARGE_BLOCK_BYTES = 1024 * 1024
# the heap's free top beyond this is given back (glibc's own default, set again because
# a large block freed before the call may already have raised it)
HEAP_TOP_BYTES = 128 * 1024
# CPython's own default
RECURSION_LIMIT = 1000


def tune_gc() -> None:
    """Let the cycle collector run every 20,000 new objects instead of every 700.

    Indexing allocates and frees millions of short-lived, acyclic objects
    (decoded JSON, logs, events) that reference counting already reclaims;
    at the default threshold the collector still scans the young ones every
    700 allocations. Cycles are still collected, a little later.
    """
    gc.set_threshold(20_000, 20, 20)


def tune_allocator() -> bool:
    """Give freed large blocks back to the system at once; False where there is no glibc.

    A batch passes through buffers of megabytes (a getLogs answer, a pickled
    frame, a batch's lists). glibc's default raises its mmap threshold each
    time such a block is freed, so the next ones come from the heap, where a
    few small objects allocated after them keep the freed pages from ever
    being returned: the process's resident size then stays near its largest
    batch plus what the heap fragmented around it. A fixed threshold (setting
    it turns the raising off) keeps every block of a megabyte or more in
    pages of its own, unmapped when freed, and the heap's top trimmed past
    128 KiB. musl and other libcs have no such raising; nothing is done there.
    """
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    # gnu_get_libc_version is glibc's alone: only its mallopt takes these parameters
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mmap_set = int(mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES)) == 1
    trim_set = int(mallopt(_M_TRIM_THRESHOLD, HEAP_TOP_BYTES)) == 1
    return mmap_set and trim_set


def tune_recursion() -> None:
    """Keep the interpreter's recursion limit at CPython's default of 1,000, or below.

    The C JSON parser counts its nesting against this limit, so at 1,000 a reply nested
    deeper (an RPC node's, GitHub's, a verdict source's) raises RecursionError, which the
    readers turn into "not JSON". py_ecc, imported with eth_account (by the devnet, the
    benchmarks and the tests), raises the limit to 100,000 at its import: at such a depth
    the parser overflows the C stack first, and one hostile reply kills the process.
    """
    sys.setrecursionlimit(min(sys.getrecursionlimit(), RECURSION_LIMIT))


def tune_process() -> None:
    """All three, for a command that runs long or indexes (the daemon, ``keeper backfill``)."""
    tune_gc()
    tune_recursion()
    tune_allocator()
