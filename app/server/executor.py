"""Where attention runs: a small dedicated thread pool, off the event loop.

Torch releases the GIL inside its kernels but takes it back between them; with
dozens of threads each running many tiny ops (FastAPI's default pool has 40),
they mostly wait on each other. A pool of ``ATTNVIZ_COMPUTE_WORKERS`` threads
(default 2) queues requests instead, so the event
loop stays free for /healthz and the page while the pool works. Long work (a head atlas, a
pass over many tokens, a gradient method: :func:`long_slot`) runs on all workers but one,
so a short request is not queued behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, Final, ParamSpec, TypeVar

from fastapi import HTTPException, status
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..attention.cancellation import (
    Cancellation,
    ComputeCancelledError,
    cancellable,
    check_cancelled,
    drop_frames,
)
from .errors import field_error
from .memory import release_memory
from .settings import Settings, get_settings

P = ParamSpec("P")
R = TypeVar("R")

SEQUENCES: Final = "sequences"
"""The field a seeded request's 503 names (its token sequences)."""
SEQUENCES_ADVICE: Final = "fewer or shorter sequences"
"""What a seeded request's 503 suggests."""

CLIENT_POLL_S: Final = 0.2
"""How often a computation's request is asked whether its client is still there (s)."""
CLIENT_CLOSED_REQUEST: Final = 499
"""The status of a request whose client went away before its answer (nginx's "Client
Closed Request"): nobody receives it; the access log shows it."""

LONG_RETRY_AFTER_S: Final = 30
"""Retry-After (s) of a long computation refused while the long ones fill their share."""

_executor: ThreadPoolExecutor | None = None
_workers: int | None = None
"""The threads of the pool :func:`start_executor` started last (None before it ran)."""
_large: asyncio.Semaphore | None = None
_long: asyncio.Semaphore | None = None
_long_waiting = 0
_client: ContextVar[Request | None] = ContextVar("attnviz_client", default=None)
_counts_lock = threading.Lock()
_counts = {"queued": 0, "computing": 0, "finished": 0, "stopped": 0, "failed": 0}
"""Computations waiting for a worker and running now, and how each one since the start
ended (:func:`work_state`)."""


def work_state() -> dict[str, int]:
    """What the compute pool is doing (GET /healthz's ``work``).

    Returns:
        ``queued``: computations waiting for a worker of the pool (a cancelled one leaves
        the queue); ``computing``: computations running on it now; ``long_running`` and
        ``long_waiting``: long computations holding a slot, and waiting for one
        (:func:`long_slot`); ``finished``, ``stopped`` (given up before their end or before
        they started: the client went away or the time budget ran out) and
        ``failed``: how the computations since the start ended. Counts, not times: a test
        or a load balancer waits on them.
    """
    with _counts_lock:
        state = dict(_counts)
    taken = 0 if _long is None else long_slots(pool_workers()) - _long._value
    return {**state, "long_running": max(0, taken), "long_waiting": _long_waiting}


def _counted(function: Callable[[], R]) -> Callable[[], R]:
    """``function`` counted in :func:`work_state` while it runs and by how it ends."""

    def run() -> R:
        ended = "failed"
        with _counts_lock:
            _counts["queued"] -= 1
            _counts["computing"] += 1
        try:
            result = function()
            ended = "finished"
            return result
        except ComputeCancelledError:
            ended = "stopped"
            raise
        finally:
            with _counts_lock:
                _counts["computing"] -= 1
                _counts[ended] += 1

    return run


class ClientWatchMiddleware:
    """Pure ASGI middleware: the request being served, kept for :func:`run_within`.

    :func:`run_within` asks it whether its client is still connected while the
    computation runs. Only read once the request's body has been read (the routes'
    arguments are parsed before they compute), so no body message is taken from the app.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request with it recorded in a context variable."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = _client.set(Request(scope, receive))
        try:
            await self.app(scope, receive, send)
        finally:
            _client.reset(token)


async def _client_gone(request: Request) -> None:
    """Return once ``request``'s client has disconnected (polled every CLIENT_POLL_S)."""
    while not await request.is_disconnected():
        await asyncio.sleep(CLIENT_POLL_S)


def start_executor(workers: int) -> None:
    """Create the pool with ``workers`` threads, replacing an earlier one.

    As many large requests are admitted at a time (:func:`held_while_sent`), and
    :func:`long_slots` of them long ones, with as many waiting (:func:`refuse_when_busy`):
    every bound counts ``workers``, whatever ATTNVIZ_COMPUTE_WORKERS says (a test starts
    its own pool).
    """
    global _executor, _workers, _large, _long
    stop_executor()
    _workers = workers
    _executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="attnviz-compute")
    _large = asyncio.Semaphore(workers)
    _long = asyncio.Semaphore(long_slots(workers))


def pool_workers() -> int:
    """The compute workers the bounds count (threads).

    The pool's, as :func:`start_executor` started it last; before it ran,
    ATTNVIZ_COMPUTE_WORKERS.
    """
    return _workers if _workers is not None else get_settings().compute_workers


def stop_executor() -> None:
    """Shut the pool down, letting running work finish."""
    global _executor
    if _executor is not None:
        _executor.shutdown(wait=False, cancel_futures=True)
        _executor = None


async def run_compute(function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run ``function(*args, **kwargs)`` on the pool and await it.

    The pool is started with the settings' ``compute_workers`` on first use (the
    app's lifespan starts it; a bare call, as in a test without the lifespan, does).
    """
    if _executor is None:
        start_executor(get_settings().compute_workers)
    loop = asyncio.get_running_loop()
    assert _executor is not None
    with _counts_lock:
        _counts["queued"] += 1
    try:
        future = _executor.submit(_counted(functools.partial(function, *args, **kwargs)))
    except BaseException:  # the pool is shut down: nothing was queued
        with _counts_lock:
            _counts["queued"] -= 1
        raise
    future.add_done_callback(_left_queue)  # cancelled before it started: never ran
    return await asyncio.wrap_future(future, loop=loop)


def _left_queue(future: Future[Any]) -> None:
    """A computation given up while it waited for a worker: it never runs, and is stopped."""
    if future.cancelled():
        with _counts_lock:
            _counts["queued"] -= 1
            _counts["stopped"] += 1


async def run_within(
    timeout_s: float, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs
) -> R:
    """:func:`run_compute`, giving up after ``timeout_s`` seconds and stopping the work.

    The function runs inside :func:`attnviz.attention.cancellation.cancellable` with a
    :class:`~attnviz.attention.cancellation.Cancellation` of its own, cancelled on
    time-out or when the client of the request being served (:class:`ClientWatchMiddleware`)
    disconnects, asked every :data:`CLIENT_POLL_S`: a thread cannot be killed, but the
    computation checks the flag between layers, generation steps and chunks
    (``check_cancelled``) and stops at the next check, its result dropped, so a given-up
    request frees its worker and its memory within about one layer's time instead of
    running to its end.

    Raises:
        TimeoutError: when the result is not there within ``timeout_s``.
        HTTPException: 499 (:data:`CLIENT_CLOSED_REQUEST`), the client went away first.
    """
    token = Cancellation()

    def run() -> R:
        try:
            with cancellable(token):
                check_cancelled()  # given up while it waited for a worker
                return function(*args, **kwargs)
        except BaseException as error:  # cancelled, timed out or failed: its tensors go now
            drop_frames(error)
            raise
        finally:  # what the computation freed goes back to the system, not to the heap
            release_memory()

    request = _client.get()
    work = asyncio.ensure_future(asyncio.wait_for(run_compute(run), timeout_s))
    watch = asyncio.ensure_future(_client_gone(request)) if request is not None else None
    try:
        if watch is not None:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():  # the client went away: stop the work at its next check
                token.cancel("the client went away")
                work.cancel()
                raise HTTPException(CLIENT_CLOSED_REQUEST, "the client went away")
        return await work
    except BaseException:  # timed out, or the client went away: nobody reads the result
        if not token.cancelled:
            token.cancel(f"the time budget of {timeout_s:g} s ran out")
        work.cancel()
        raise
    finally:
        if watch is not None:
            watch.cancel()


def long_slots(workers: int) -> int:
    """How many long computations run at once: all workers but one (at least one)."""
    return max(1, workers - 1)


async def long_slot(field: str, what: str) -> asyncio.Semaphore:
    """Wait for one of the long computations' slots (:func:`long_slots`).

    The caller releases it. Long work (a head atlas not cached yet; a pretrained model's
    pass over more than :data:`.limits.LONG_WORK_TOKENS` tokens not kept yet, a gradient
    method, value zeroing: :func:`.routers.pretrained.long_share`) runs on at most all
    compute workers but one, so a short request (a toy map, a sentence through a model)
    always finds a worker free and is not queued behind any number of them. As many long
    requests as there are slots wait for one besides; one more is refused
    (:func:`refuse_when_busy`).

    Args:
        field: the request field the 503 names.
        what: the work, as the 503 says it ("a head atlas", "a long input's maps").

    Returns:
        The slots' semaphore, acquired.

    Raises:
        HTTPException: 503 with Retry-After (:data:`LONG_RETRY_AFTER_S`), type "busy",
            when every slot is taken and as many requests wait already.
    """
    global _long_waiting
    slots = refuse_when_busy(field, what)
    _long_waiting += 1
    try:
        await slots.acquire()
    finally:
        _long_waiting -= 1
    return slots


def refuse_when_busy(field: str, what: str) -> asyncio.Semaphore:
    """The long computations' slots, or the 503 of :func:`long_slot`.

    Refused when every slot is taken and as many requests wait already (a stream checks
    this before its 200): :func:`long_slots` of the pool's workers (:func:`pool_workers`).

    Args:
        field: the request field the 503 names (``loc`` ["body", field]).
        what: the work, as the 503 says it.

    Returns:
        The slots' semaphore (not acquired).

    Raises:
        HTTPException: 503 with Retry-After (:data:`LONG_RETRY_AFTER_S`), type "busy".
    """
    global _long
    slots = long_slots(pool_workers())
    if _long is None:
        _long = asyncio.Semaphore(slots)
    if _long.locked() and _long_waiting >= slots:
        raise HTTPException(
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            detail=[
                {
                    "loc": ["body", field],
                    "msg": f"the server is computing as many long requests as it takes at "
                    f"once, and as many wait; {what} can be asked again in "
                    f"{LONG_RETRY_AFTER_S} s",
                    "type": "busy",
                }
            ],
            headers={"Retry-After": str(LONG_RETRY_AFTER_S)},
        )
    return _long


async def held_while_sent(
    work: Awaitable[Response], *, long: tuple[str, str] | None = None
) -> Response:
    """Await ``work``, a large request's response, holding a large-request slot.

    The slot is held until a streamed body has been sent in full (or the client
    went away): a streamed response keeps its weights in memory while it is sent,
    so the slots bound the memory of large requests, compute and send, by the
    number of compute workers. Further large requests wait their turn; small ones
    do not.

    Args:
        work: the response being computed.
        long: (field, what) for long work (:func:`long_slot`): a long computation's slot
            is taken first, and held as long as the large-request slot, so that a long
            request waiting for its turn holds no large-request slot.

    Raises:
        HTTPException: as :func:`long_slot`.
    """
    global _large
    if _large is None:
        _large = asyncio.Semaphore(pool_workers())
    held: list[asyncio.Semaphore] = []
    try:
        if long is not None:
            held.append(await long_slot(*long))
        await _large.acquire()
        held.append(_large)
    except BaseException:
        for semaphore in held:
            semaphore.release()
        if inspect.iscoroutine(work):  # refused or cancelled before it started: never run
            work.close()
        raise
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            for semaphore in held:
                semaphore.release()

    try:
        response = await work
    except BaseException:
        release()
        raise
    if not isinstance(response, StreamingResponse):
        release()
        return response
    inner = response.body_iterator
    # a stream's own stop (``stop_work``, at once) and close (``close_work``, in a thread:
    # it may wait for the computation's thread): a stream that ends unsent (its client
    # gone) stops its computation and drops what it holds before the memory is trimmed
    stop_work = getattr(response, "stop_work", None)
    close_work = getattr(response, "close_work", None)
    sent = False
    finished = False

    def after() -> None:
        try:
            if close_work is not None:
                close_work()
        finally:
            release_memory()

    def stop_now() -> None:
        if not sent and stop_work is not None:
            stop_work()

    def finish() -> None:
        nonlocal finished
        if finished:
            return
        finished = True
        stop_now()
        release()
        with contextlib.suppress(RuntimeError):  # no loop: the server is stopping
            asyncio.get_running_loop().run_in_executor(None, after)

    async def body() -> AsyncIterator[str | bytes | memoryview]:
        nonlocal sent
        try:
            async for chunk in inner:
                yield chunk
            sent = True
        finally:  # sent, failed or abandoned: the slot is free again
            finish()

    response.body_iterator = body()
    # A client gone before the first chunk: Starlette cancels the send before body() ever
    # starts, and a generator that never started runs no finally. The response's own
    # call releases the slot however it ends.
    response.__class__ = _SlotStreamingResponse
    response.release_slot = finish  # type: ignore[attr-defined]
    response.stop_now = stop_now  # type: ignore[attr-defined]
    return response


class _SlotStreamingResponse(StreamingResponse):
    """A streamed response of :func:`held_while_sent`: its call frees its slot at the end."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the response as Starlette does, then release the slot.

        However it ends: sent, failed, or abandoned before or after its first chunk.
        """

        async def watched() -> Message:
            # the client gone: its computation stops now, not once the sender's thread
            # returns with the next chunk (a layer may take seconds)
            message = await receive()
            if message["type"] == "http.disconnect":
                self.stop_now()  # type: ignore[attr-defined]
            return message

        try:
            await super().__call__(scope, watched, send)
        finally:
            self.release_slot()  # type: ignore[attr-defined]


async def computed(
    field: str,
    advice: str,
    settings: Settings,
    function: Callable[P, R],
    *args: P.args,
    **kwargs: P.kwargs,
) -> R:
    """Run ``function`` on the compute pool within ``settings.compute_timeout_s``.

    Args:
        field: the request field whose size the time depends on (``sequences``,
            ``texts``, ``audio``, ``image``): the field the 503 names.
        advice: what to try instead ("fewer or shorter texts"), at the end of the message.
        settings: the time budget (ATTNVIZ_COMPUTE_TIMEOUT_S).
        function: the blocking work, called with ``args`` and ``kwargs``; it is
            cancelled (:func:`run_within`) when the budget ends.

    Raises:
        HTTPException: 503 naming ``field``, the time budget and ``advice``.
    """
    try:
        return await run_within(settings.compute_timeout_s, function, *args, **kwargs)
    except TimeoutError as error:
        raise field_error(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            field,
            f"the computation took longer than {settings.compute_timeout_s:g} s "
            f"(ATTNVIZ_COMPUTE_TIMEOUT_S) and was stopped; try {advice}",
        ) from error
