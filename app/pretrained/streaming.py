"""How a long computation hands its results to a stream: a time budget, a thread's feed.

:class:`ProgressBudget` stops a stream that makes no progress; :class:`ThreadFeed` runs a
computation (an observed forward pass) in a thread of its own and yields what it produces
(each layer's maps) in the iterating thread as soon as it is made.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

from ..attention.cancellation import ComputeCancelledError, drop_frames

__all__ = ["ProgressBudget", "ThreadFeed"]

T = TypeVar("T")
R = TypeVar("R")


class ProgressBudget:
    """A stream's time budget: it stops once ``idle_s`` seconds pass with no new layer.

    A long input's grid may take minutes on a small machine while every layer arrives
    within seconds: the budget covers the wait for the next layer (and for the first),
    not the whole stream, so work that makes progress is not cut, and work that sends
    nothing is.

    Args:
        idle_s: the most seconds between two layers (and before the first).
        message: the ComputeCancelledError's message once the budget ends.
    """

    def __init__(self, idle_s: float, message: str) -> None:
        self.idle_s, self.message = idle_s, message
        self.until = time.monotonic() + idle_s
        self.stopped: str | None = None

    def progressed(self) -> None:
        """A layer was made: the next may take ``idle_s`` again."""
        self.until = time.monotonic() + self.idle_s

    def stop(self, reason: str) -> None:
        """End the budget now (the stream's client went away): the next check raises.

        Safe from any thread (a stream's sender stops the pass computing in another).
        """
        self.stopped = reason

    def check(self) -> None:
        """Raise ComputeCancelledError once the budget has ended (or was stopped).

        Raises:
            ComputeCancelledError: with :attr:`message`, or the reason given to :meth:`stop`.
        """
        if self.stopped is not None:
            raise ComputeCancelledError(self.stopped)
        if time.monotonic() > self.until:
            raise ComputeCancelledError(self.message)


class ThreadFeed(Generic[T]):
    """Items a computation in another thread makes, yielded where they are iterated.

    Give :meth:`put` to the computation as its sink, then iterate :meth:`run`: each item
    comes out as soon as it is put; the computation's result is the generator's return
    value (``result = yield from feed.run(...)``), its error is raised in the iterating
    thread (without the computation's frames: :func:`.cancellation.drop_frames`, so its
    tensors are freed as the thread ends). Closing the generator early (a client gone)
    calls ``stop`` and waits for the thread.
    """

    def __init__(self) -> None:
        self._items: queue.Queue[tuple[str, Any]] = queue.Queue()

    def put(self, item: T) -> None:
        """Hand one item to the iterating thread (called by the computation)."""
        self._items.put(("item", item))

    def run(
        self,
        compute: Callable[[], R],
        *,
        context: contextvars.Context,
        name: str,
        stop: Callable[[], None],
    ) -> Generator[T, None, R]:
        """Run ``compute`` in a daemon thread named ``name``, in ``context``; yield its items.

        Args:
            compute: the computation; it calls :meth:`put` with each item.
            context: the context it runs in (the request's cancellation).
            stop: called when the iteration ends, however it ends (the computation then
                stops at its next check), before the thread is joined.

        Raises:
            whatever ``compute`` raises.
        """

        def work() -> None:
            try:
                self._items.put(("done", compute()))
            except BaseException as error:  # handed to the iterating thread
                drop_frames(error)
                self._items.put(("error", error))

        thread = threading.Thread(target=context.run, args=(work,), name=name, daemon=True)
        thread.start()
        try:
            while True:
                kind, value = self._items.get()
                if kind == "item":
                    yield value
                elif kind == "error":
                    raise value
                else:
                    return value  # type: ignore[no-any-return]
        finally:
            stop()
            thread.join()
