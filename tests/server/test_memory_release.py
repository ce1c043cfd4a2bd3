"""Memory goes back after every computation, however it ends (issue 53, finding 1).

A computation's tensors must be gone by the time the server hands its free memory back to
the system (``release_memory``, glibc's ``malloc_trim``), whether it finished, failed, or
was stopped by its time budget or a client that left. Before, a stopped or failed one kept
every frame it unwound through alive in its exception's traceback (the future holding it
is collected whenever), so the trim ran with gigabytes still in use and the idle server
kept them. Each test holds a weak reference to a tensor the computation made and records,
at the moment of the trim, whether it is still alive; the tests wait on the trim's event,
not on time.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
from attnviz.attention.cancellation import ComputeCancelledError, check_cancelled, drop_frames
from attnviz.server import executor

WAIT_S = 60.0  # an upper bound for a busy machine: each test waits on an event


class Trims:
    """A stand-in for ``release_memory`` that notes whether the tensor was alive at the trim."""

    def __init__(self) -> None:
        self.tensor: weakref.ref[torch.Tensor] | None = None
        self.alive: list[bool] = []
        self.done = threading.Event()

    def __call__(self) -> bool:
        self.alive.append(self.tensor is not None and self.tensor() is not None)
        self.done.set()
        return True

    def made(self, tensor: torch.Tensor) -> None:
        self.tensor = weakref.ref(tensor)


@pytest.fixture
def trims(monkeypatch: pytest.MonkeyPatch) -> Trims:
    found = Trims()
    monkeypatch.setattr(executor, "release_memory", found)
    return found


def run_within(timeout_s: float, work: Callable[[], Any]) -> Any:
    """:func:`attnviz.server.executor.run_within` on an event loop of its own thread (a test
    before this one in the same process may have left a loop running in this thread)."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, executor.run_within(timeout_s, work)).result()


def computing(trims: Trims, end: Callable[[], Any]) -> Callable[[], Any]:
    """A computation that makes a 4 MiB tensor, then ends as ``end`` does."""

    def work() -> Any:
        big = torch.zeros(1024, 1024)
        trims.made(big)
        return end()

    return work


def test_a_computation_stopped_by_its_time_budget_has_freed_its_tensors_at_the_trim(
    trims: Trims,
) -> None:
    def until_stopped() -> None:
        while True:  # a pass's layers: each checks whether it was given up
            check_cancelled()
            threading.Event().wait(0.01)

    with pytest.raises(TimeoutError):
        run_within(0.1, computing(trims, until_stopped))
    assert trims.done.wait(WAIT_S)  # the worker stopped at its next check, then trimmed
    assert trims.alive == [False]


def test_a_failed_computation_has_freed_its_tensors_at_the_trim(trims: Trims) -> None:
    def fail() -> None:
        raise ValueError("a bad option, found late")

    with pytest.raises(ValueError, match="found late") as raised:
        run_within(WAIT_S, computing(trims, fail))
    assert trims.alive == [False]
    # the traceback still says where it failed, for the log
    assert raised.traceback[-1].name == "fail"


def test_a_finished_computation_keeps_only_its_result(trims: Trims) -> None:
    result = run_within(WAIT_S, computing(trims, lambda: 7))
    assert result == 7 and trims.alive == [False]


def test_drop_frames_frees_the_locals_of_every_chained_exception() -> None:
    refs: list[weakref.ref[torch.Tensor]] = []

    def inner() -> None:
        held = torch.ones(8)
        refs.append(weakref.ref(held))
        raise KeyError("inner")

    def outer() -> None:
        held = torch.ones(8)
        refs.append(weakref.ref(held))
        try:
            inner()
        except KeyError as error:
            raise ComputeCancelledError("outer") from error

    try:
        outer()
    except ComputeCancelledError as error:
        assert all(ref() is not None for ref in refs)  # the traceback holds them
        drop_frames(error)
        assert all(ref() is None for ref in refs)


@pytest.mark.parametrize("sent", [True, False], ids=["sent", "abandoned"])
def test_a_stream_abandoned_by_its_client_stops_its_work(sent: bool) -> None:
    """A streamed answer whose sending ends before its end (the client went away) calls the
    stream's ``stop_work``, which stops its computation running in a thread of its own
    (pretrained.streaming.ProgressBudget.stop); one sent in full does not. Either way its
    ``close_work`` runs, in a thread, before the memory is trimmed: what the stream holds
    is dropped then, not whenever a cycle of it is collected."""
    from starlette.responses import StreamingResponse

    stops: list[str] = []
    closed: list[str] = []

    async def chunks() -> Any:
        for part in (b"start\n", b"layer 0\n", b"layer 1\n", b"end\n"):
            yield part

    loop_thread: list[str] = []

    async def scenario() -> list[bytes]:
        loop_thread.append(threading.current_thread().name)

        async def work() -> StreamingResponse:
            response = StreamingResponse(chunks())
            response.stop_work = lambda: stops.append("stopped")  # type: ignore[attr-defined]
            response.close_work = lambda: closed.append(threading.current_thread().name)  # type: ignore[attr-defined]
            return response

        response = await executor.held_while_sent(work())
        body = response.body_iterator
        got = [await body.__anext__(), await body.__anext__()]
        if sent:
            got += [chunk async for chunk in body]
        else:
            await body.aclose()  # Starlette stops sending: the client is gone
        return got  # type: ignore[return-value]

    with ThreadPoolExecutor(1) as thread:
        got = thread.submit(asyncio.run, scenario()).result()
    assert stops == ([] if sent else ["stopped"])
    assert len(got) == (4 if sent else 2)
    # asyncio.run waited for the default executor: the close ran there, off the loop
    assert len(closed) == 1 and closed[0] != loop_thread[0]
