"""GET / and /models: the pages; GET /static/vendor/plotly.min.js: Plotly.js from plotly."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import plotly
from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates

from app.presets import DEFAULT_PRESET, PRESETS

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "templates"
templates = Jinja2Templates(directory=TEMPLATES_DIR)

router = APIRouter(tags=["page"])


@lru_cache
def plotly_js_path() -> Path:
    """plotly.min.js as shipped in the plotly Python package (works offline).

    Raises:
        FileNotFoundError: if the installed plotly package lacks its bundled JS.
    """
    path = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise FileNotFoundError(f"plotly.min.js not found at {path}; reinstall plotly")
    return path


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def read_index(request: Request) -> HTMLResponse:
    """The visualizer page; its script computes and draws the default preset on load."""
    return templates.TemplateResponse(
        request,
        "index.html",
        {
            "presets": [p.model_dump(mode="json") for p in PRESETS],
            "default_preset": DEFAULT_PRESET.name,
        },
    )


@router.get("/models", response_class=HTMLResponse, include_in_schema=False)
def read_models_page(request: Request) -> HTMLResponse:
    """The pretrained-model page: a typed sentence, every layer's and head's attention."""
    return templates.TemplateResponse(request, "models.html", {})


@router.get("/static/vendor/plotly.min.js", include_in_schema=False)
def read_plotly_js() -> FileResponse:
    """Plotly.js, served from the plotly package's own copy (no CDN)."""
    return FileResponse(
        plotly_js_path(),
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=86400"},
    )
