"""Stopping a computation whose answer nobody waits for any more (its time budget ran out).

A Python thread cannot be killed, and a torch kernel cannot be interrupted. What can be
done is to look, at the places where a long computation passes often (every attention
module and attention layer of a forward pass, every generation step, every head group of
a layer walk, every layer of the seeded stack), whether the request it serves has been
given up, and
stop there. The server (:mod:`attnviz.server.executor`) runs each request's work inside
:func:`cancellable` with a :class:`Cancellation` of its own and calls
:meth:`Cancellation.cancel` when the time budget ends, so that the work stops at its next
check, at most one layer (or step, or chunk) later, instead of running on for minutes.

Outside :func:`cancellable` (a notebook, the CLI, a test) :func:`check_cancelled` does
nothing.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class ComputeCancelledError(Exception):
    """The computation was given up (its request's time budget ended); nobody reads its result."""


class Cancellation:
    """A flag one request's computation checks (:func:`check_cancelled`); thread-safe.

    Attributes:
        reason: why it was cancelled (the message of :class:`ComputeCancelledError`).
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = "cancelled"

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the computation to stop at its next check."""
        self.reason = reason
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._event.is_set()


_current: ContextVar[Cancellation | None] = ContextVar("attnviz_cancellation", default=None)


def check_cancelled() -> None:
    """Stop here if the current computation was cancelled.

    Cheap (one context-variable read); call it between layers, steps and chunks.

    Raises:
        ComputeCancelledError: the :class:`Cancellation` of the enclosing :func:`cancellable`
            was cancelled.
    """
    token = _current.get()
    if token is not None and token.cancelled:
        raise ComputeCancelledError(token.reason)


@contextmanager
def cancellable(token: Cancellation) -> Iterator[Cancellation]:
    """Make :func:`check_cancelled` inside the block look at ``token`` (context-local)."""
    reset = _current.set(token)
    try:
        yield token
    finally:
        _current.reset(reset)


def drop_frames(error: BaseException) -> None:
    """Free the locals of the finished frames an exception's traceback holds (and its causes').

    A computation that ends in an exception (cancelled, timed out, failed) keeps every frame
    it unwound through alive in the traceback, with their tensors: gigabytes of a long
    input's pass, held until the exception object goes, which for a cancelled request whose
    result nobody reads is whenever the future holding it is collected. The frames are
    cleared (``traceback.clear_frames``: the file names and line numbers stay, for the log),
    so their memory is free before the server hands it back to the system
    (:func:`attnviz.server.memory.release_memory`). Frames still running (the caller's)
    are left as they are.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__traceback__ is not None:
            traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__
