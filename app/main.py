"""Assembles the FastAPI application; no logic lives here."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app import __version__
from app.errors import install_error_handlers
from app.routers import attention, health, lessons, pages, presets

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"


def create_app() -> FastAPI:
    """The AttnViz app: page at /, JSON API at /api/v1, docs at /docs and /redoc."""
    application = FastAPI(
        title="AttnViz",
        version=__version__,
        description="Multi-head attention visualizer: per-head attention weights of "
        "seeded multi-head attention over token batches, with padding, causal and "
        "cross-attention masks.",
    )
    install_error_handlers(application)
    # The plotly route comes before the /static mount so that it is not shadowed.
    application.include_router(pages.router)
    application.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    application.include_router(health.router)
    application.include_router(presets.router)
    application.include_router(attention.router)
    application.include_router(lessons.router)
    return application


app = create_app()
