"""Where attention runs: a small dedicated thread pool, off the event loop.

Torch releases the GIL inside its kernels but takes it back between them; with
dozens of threads each running many tiny ops (FastAPI's default pool has 40),
they mostly wait on each other. A pool of ``ATTNVIZ_COMPUTE_WORKERS`` threads
(default 2, the cores of our machines) queues requests instead, so the event
loop stays free for /healthz and the page while the pool works.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_executor: ThreadPoolExecutor | None = None


def start_executor(workers: int) -> None:
    """Create the pool with ``workers`` threads (replacing an earlier one)."""
    global _executor
    stop_executor()
    _executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="attnviz-compute")


def stop_executor() -> None:
    """Shut the pool down, letting running work finish."""
    global _executor
    if _executor is not None:
        _executor.shutdown(wait=False, cancel_futures=True)
        _executor = None


async def run_compute(function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run ``function(*args, **kwargs)`` on the pool (started on first use) and await it."""
    if _executor is None:
        start_executor(2)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor, functools.partial(function, *args, **kwargs))


async def run_within(
    timeout_s: float, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs
) -> R:
    """:func:`run_compute`, giving up after ``timeout_s`` seconds.

    A thread cannot be stopped: on time-out the computation finishes in the
    background and its result is dropped, so the pool stays bounded and the
    memory is freed when it ends.

    Raises:
        TimeoutError: when the result is not there within ``timeout_s``.
    """
    return await asyncio.wait_for(run_compute(function, *args, **kwargs), timeout_s)
