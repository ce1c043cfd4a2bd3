"""Giving memory back to the system after large requests (glibc's allocator).

A request over a long input allocates and frees gigabytes of tensors. glibc's ``malloc``
keeps freed memory for reuse: in per-thread arenas, and, once a large block has been
freed, with its threshold for serving blocks by ``mmap`` raised (up to 32 MiB), so that
later tensors come from the heap and fragment it. Measured on SmolLM2 at 4,032 tokens,
the idle server kept over 1 GiB it no longer used. Two measures, both glibc's own:

* at start-up (:func:`tune_allocator`), ``mallopt``: a fixed ``M_MMAP_THRESHOLD`` of
  :data:`MMAP_THRESHOLD_BYTES` (every block from 32 MiB up is its own mapping, returned to
  the system when freed, and the threshold no longer moves) and at most
  :data:`ARENA_MAX` arenas (glibc's default is eight per core, and the streamed grid is
  walked by Starlette's pool of up to 40 threads);
* after each computation and each streamed response (:func:`release_memory`),
  ``malloc_trim(0)``: the free memory of every arena is handed back (``madvise``), not
  only the top of the heap (0.15 ms a call).

Measured with benchmarks/hostile.py, SmolLM2 at 4,032 + 64 tokens, streamed grid walked
after the pass (issue 29): the server's peak RSS growth was 1.4 GiB with both (a 1 MiB
threshold then), 6.9 GiB with the trim alone (freed blocks held in many threads' arenas
during the walk); idle RSS 10 s later returned within about 110 MiB either way. The grid is
now computed during the pass in chunks of at most 32 MiB of weights (issue 30), so the
threshold is 32 MiB: small blocks are reused from the arenas instead of faulted in afresh
(benchmarks/decoder.py gives the growth with it).
Elsewhere than glibc (macOS, musl in Alpine images) both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from typing import Final

M_MMAP_THRESHOLD: Final = -3
"""glibc's ``mallopt`` parameter numbers (malloc.h)."""
M_ARENA_MAX: Final = -8
MMAP_THRESHOLD_BYTES: Final = 32 * 2**20
"""Blocks of this size and above are mapped on their own (glibc's default is 128 KiB, raised
dynamically up to 32 MiB; fixing it stops the moving). 32 MiB: the grid computed during the
pass allocates and frees blocks of a few MiB per chunk of rows, thousands per pass; mapped
afresh each time (a 1 MiB threshold) SmolLM2's grid at 1,024 tokens took 7.6-8.0 s, taken
from the arenas 6.2 s (in one process, side by side)."""
ARENA_MAX: Final = 4
"""The most malloc arenas (glibc's default is 8 per core)."""

log = logging.getLogger("attnviz.memory")


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """glibc, when this process runs on it (it has ``malloc_trim``), else None."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        libc.malloc_trim  # noqa: B018  (glibc only)
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def tune_allocator() -> bool:
    """Set glibc's mmap threshold and arena count (module docstring); True if done."""
    libc = _libc()
    if libc is None:
        return False
    done = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(M_ARENA_MAX, ARENA_MAX)
    )
    log.debug("malloc tuned: %s", done)
    return done


def release_memory() -> bool:
    """Hand the allocator's free memory back to the system (``malloc_trim(0)``).

    Returns:
        True when memory was released, False when none was (or not on glibc).
    """
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.malloc_trim(0))
