"""The head atlas: POST /api/v1/models/heads, and its streamed form /heads/stream.

Every layer's and head's scores (previous-token, induction, duplicate-token, first-token,
self, entropy: :mod:`attnviz.pretrained.atlas`), computed once per model and corpus and
then read from the server's disk cache (:mod:`attnviz.pretrained.atlas.cache`). A request is
checked once, as a plan (:func:`attnviz.pretrained.atlas.plan_atlas`), before any work or
cache lookup. The work runs on the compute pool under its own time budget
(ATTNVIZ_ATLAS_TIMEOUT_S), holding a large-request slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import torch
from fastapi import APIRouter, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse

from ...attention.cancellation import ComputeCancelledError
from ...attention.errors import AttentionInputError
from ...pretrained import ModelNotReady, ModelRegistry
from ...pretrained.atlas import AtlasPlan, HeadScores, cached_head_scores, plan_atlas
from ...pretrained.atlas.cache import atlas_path
from ..dependencies import RegistryDep, SettingsDep, ready_model
from ..errors import ERROR_RESPONSES, engine_errors, field_error, out_of_memory
from ..executor import held_while_sent, run_within
from ..payloads.pretrained import ndjson
from ..schemas.atlas import HeadAtlasRequest, HeadAtlasResponse
from ..settings import Settings
from ..transport import respond

router = APIRouter(prefix="/api/v1/models", tags=["pretrained"])
logger = logging.getLogger(__name__)

ADVICE = "fewer or shorter texts, or a larger ATTNVIZ_ATLAS_TIMEOUT_S"


async def atlas_plan(registry: ModelRegistry, request: HeadAtlasRequest) -> AtlasPlan:
    """The request checked once: its model (as :func:`..dependencies.ready_model`) and plan.

    The plan (the texts' tokens, the random sequences) is built in a worker thread.

    Raises:
        HTTPException: 422 naming ``model`` for an unknown or failed model and for a
            speech or image model (no score is defined for it yet), 503 while it loads;
            422 naming ``texts``, ``texts[i]`` or ``device`` as
            :func:`attnviz.pretrained.atlas.plan_atlas` says.
    """
    modality = "text"
    with contextlib.suppress(ModelNotReady, AttentionInputError, KeyError):
        modality = registry.get(request.model).modality  # a speech model's 422 comes below
    model = ready_model(registry, request.model, modality)
    with engine_errors(request.device):
        return await run_in_threadpool(
            plan_atlas, model, request.texts, repeat_length=None, device=request.device
        )


def timed_out(settings: Settings) -> str:
    """The message of an atlas stopped by its time budget."""
    return (
        f"the head atlas took longer than {settings.atlas_timeout_s:g} s "
        f"(ATTNVIZ_ATLAS_TIMEOUT_S) and was stopped; try {ADVICE}"
    )


def payload(scores: HeadScores, cached: bool) -> dict[str, Any]:
    """The JSON body of :class:`HeadAtlasResponse`."""
    return {**scores.to_dict(), "cached": cached}


def atlas_share(plan: AtlasPlan, settings: Settings) -> tuple[str, str] | None:
    """The long-work share of an atlas not on disk yet (:func:`..executor.long_slot`).

    As :func:`..executor.held_while_sent` takes it; None for one read from the cache.
    """
    if atlas_path(settings.cache_dir, plan.model, plan.key).is_file():
        return None
    return ("texts", "a head atlas")


def compute_atlas(
    plan: AtlasPlan, settings: Settings, progress: Any = None
) -> tuple[HeadScores, bool]:
    """The blocking part: the plan's scores from disk, or computed and kept there."""
    return cached_head_scores(plan, None, settings.cache_dir, progress=progress)


@router.post(
    "/heads",
    response_model=HeadAtlasResponse,
    responses=ERROR_RESPONSES,
    summary="Head atlas: every layer's and head's scores over a corpus",
)
async def head_atlas(
    request: HeadAtlasRequest, settings: SettingsDep, registry: RegistryDep
) -> Response:
    """Score every head of a text model, each score a (num_layers, num_heads) array.

    The scores: previous-token, induction, duplicate-token, first-token (attention
    sinks), self and entropy (``definitions`` gives each one's formula and source).

    Natural-text scores run over ``texts`` or the corpus shipped with AttnViz; induction
    and duplicate-token over seeded repeated random tokens. The first request for a
    model and corpus computes them (one forward pass per text: about a minute for
    SmolLM2-135M on two CPU cores); later ones read them from the server's disk cache
    (``cached``: true). ``/heads/stream`` gives the same answer with progress lines.
    """
    plan = await atlas_plan(registry, request)

    async def work() -> Response:
        try:
            with engine_errors(request.device):
                scores, cached = await run_within(
                    settings.atlas_timeout_s, compute_atlas, plan, settings
                )
        except TimeoutError as error:
            raise field_error(
                status.HTTP_503_SERVICE_UNAVAILABLE, "texts", timed_out(settings)
            ) from error
        return respond(payload(scores, cached))

    return await held_while_sent(work(), long=atlas_share(plan, settings))


@router.post(
    "/heads/stream",
    responses={
        **ERROR_RESPONSES,
        200: {
            "description": "NDJSON: `progress` lines, then an `end` line with the atlas.",
            "content": {"application/x-ndjson": {}},
        },
    },
    response_class=StreamingResponse,
    summary="Head atlas, with its progress streamed while it is computed",
)
async def stream_head_atlas(
    request: HeadAtlasRequest, settings: SettingsDep, registry: RegistryDep
) -> Response:
    """POST /heads as NDJSON lines, for a page that shows how far the computation is.

    * ``{"type": "progress", "done": k, "total": n}`` after each forward pass (none when
      the atlas comes from the disk cache);
    * ``{"type": "end", ...}``: the whole response of POST /heads;
    * or ``{"type": "error", "detail": ...}``: stopped (time budget, out of memory).

    A client that goes away stops the computation at its next layer.
    """
    plan = await atlas_plan(registry, request)

    async def lines() -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

        def progress(done: int, total: int) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (done, total))

        work = asyncio.ensure_future(
            run_within(settings.atlas_timeout_s, compute_atlas, plan, settings, progress)
        )
        waiter: asyncio.Future[tuple[int, int]] | None = None
        try:
            while not work.done() or not queue.empty():
                waiter = asyncio.ensure_future(queue.get())
                await asyncio.wait({work, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if waiter.done():
                    done, total = waiter.result()
                    yield ndjson({"type": "progress", "done": done, "total": total})
                else:
                    waiter.cancel()
            scores, cached = work.result()
        except TimeoutError:
            yield ndjson({"type": "error", "detail": timed_out(settings)})
            return
        except torch.OutOfMemoryError:
            yield ndjson({"type": "error", "detail": out_of_memory(request.device)})
            return
        except (AttentionInputError, ComputeCancelledError) as error:
            yield ndjson({"type": "error", "detail": str(error)})
            return
        except Exception as error:  # never expected: said on the stream, and logged
            logger.exception("head atlas of %s failed", plan.model.name)
            yield ndjson({"type": "error", "detail": f"the head atlas failed: {error}"})
            return
        except BaseException:  # the client went away: stop the computation
            work.cancel()
            raise
        finally:
            if waiter is not None and not waiter.done():
                waiter.cancel()
        yield ndjson({"type": "end", **payload(scores, cached)})

    async def stream() -> Response:
        return StreamingResponse(lines(), media_type="application/x-ndjson")

    return await held_while_sent(stream(), long=atlas_share(plan, settings))
