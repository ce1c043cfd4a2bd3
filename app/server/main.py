"""The app factory: settings, caches, executor, middleware, routers and the start-up warm-up."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import torch
from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles

from .. import __version__
from ..attention import compute_attention
from ..attention.module_cache import MODULES
from ..pretrained import MODELS, PretrainedModel
from ..pretrained.recordings import RECORDINGS
from ..resources import STATIC_DIR
from .errors import install_error_handlers, require_valid_unicode
from .executor import ClientWatchMiddleware, run_compute, start_executor, stop_executor
from .limits import UPLOAD_PATHS
from .memory import release_memory, tune_allocator
from .middleware import AccessLogMiddleware, BodyLimitMiddleware, SecurityHeadersMiddleware
from .openapi import install_openapi
from .presets import DEFAULT_PRESET
from .response_cache import RESPONSES
from .routers import (
    attention,
    heads,
    health,
    lessons,
    media,
    pages,
    presets,
    pretrained,
)
from .schemas import REQUEST_SCHEMAS
from .settings import get_settings


@asynccontextmanager
async def lifespan(application: FastAPI) -> AsyncIterator[None]:
    """Size the caches, warm them (and torch) with the default preset, load the models.

    The first forward pass of a process pays for torch's lazy initialisation
    (of the order of a second); doing it at start-up keeps it off the first page load.
    The pretrained models (:mod:`attnviz.pretrained`) are named here and loaded in a
    background thread, once per process, and shared by every request; until one is
    ready, /api/v1/models says "loading" and a request to it is a 503 with Retry-After.
    """
    settings = get_settings()
    tune_allocator()
    torch.set_num_threads(settings.resolved_torch_threads())
    MODULES.resize(settings.model_cache_bytes)
    start_executor(settings.compute_workers)
    RESPONSES.configure(settings.response_cache_bytes, settings.response_cache_item_bytes)
    preset = DEFAULT_PRESET.request
    await run_compute(
        compute_attention, preset.sequences, mask=preset.mask, verify=True, config=preset.layer()
    )
    registry, recordings = application.state.registry, application.state.recordings
    registry.configure(
        settings.model_dirs,
        models=settings.models,
        packaged=settings.packaged_models,
        cache_dir=settings.cache_dir,
        placement=settings.placement(),
    )
    for given in application.state.given_models:  # create_app(models=...)
        registry.add(given)
    registry.start(release_memory)  # in the background: the server answers while models load
    recordings.resize(settings.recording_cache_bytes, settings.kept_pass_disk_bytes)
    yield
    registry.stop()
    stop_executor()
    MODULES.clear()
    registry.clear()
    recordings.clear()


def configure_access_log() -> None:
    """Send the attnviz.access JSON lines to stderr, once."""
    logger = logging.getLogger("attnviz.access")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def create_app(models: Sequence[PretrainedModel] = ()) -> FastAPI:
    """The AttnViz app: page at /, JSON API at /api/v1, docs at /docs and /redoc.

    Args:
        models: models loaded in Python (:func:`attnviz.pretrained.wrap_model`: any dtype,
            device or device map), offered after the configured ones, ready at once::

                model = AutoModelForCausalLM.from_pretrained(path, device_map="auto")
                app = create_app([wrap_model(model, tokenizer, name="mine")])
                uvicorn.run(app)
    """
    application = FastAPI(
        lifespan=lifespan,
        # /docs and /redoc are served by attnviz.server.routers.pages from this server's own copy
        # of Swagger UI and ReDoc (fastapi-offline), not from a CDN.
        docs_url=None,
        redoc_url=None,
        title="AttnViz",
        version=__version__,
        description="Multi-head attention visualizer: per-head attention weights of "
        "seeded multi-head attention over token batches, with padding, causal and "
        "cross-attention masks.",
        dependencies=[Depends(require_valid_unicode)],
    )
    application.state.given_models = list(models)
    # The process's pretrained models and passes, reached by the routes as dependencies
    # (attnviz.server.dependencies); one process serves one app.
    application.state.registry = MODELS
    application.state.recordings = RECORDINGS
    install_error_handlers(application)
    install_openapi(application, REQUEST_SCHEMAS)
    settings = get_settings()
    # Outermost last: the log sees every response, the body limit runs before parsing;
    # innermost, the request a computation asks whether its client is still there.
    application.add_middleware(ClientWatchMiddleware)
    application.add_middleware(SecurityHeadersMiddleware)
    if settings.cors_origins:
        application.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["content-type"],
        )
    application.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        upload_bytes=settings.max_upload_bytes,
        upload_paths=UPLOAD_PATHS,
    )
    if settings.access_log:
        configure_access_log()
        application.add_middleware(AccessLogMiddleware)
    # The plotly route comes before the /static mount so that it is not shadowed.
    application.include_router(pages.router)
    application.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    application.include_router(health.router)
    application.include_router(presets.router)
    application.include_router(attention.router)
    application.include_router(lessons.router)
    application.include_router(pretrained.router)
    application.include_router(heads.router)
    application.include_router(media.router)
    return application


app = create_app()
