"""The pages (/, /models), the API docs (/docs, /redoc) and the vendored scripts they load.

Plotly.js comes from the plotly package; Swagger UI and ReDoc from fastapi-offline,
which ships the files FastAPI's own docs pages would load from a CDN. Nothing is
fetched from outside this server, so every page works offline.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import fastapi_offline
import plotly
from fastapi import APIRouter, HTTPException, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates

from ..limits import MAX_LAYERS
from ..middleware import docs_content_security_policy
from ..presets import DEFAULT_PRESET, PRESETS
from ..resources import TEMPLATES_DIR

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
            "max_layers": MAX_LAYERS,
        },
    )


@router.get("/models", response_class=HTMLResponse, include_in_schema=False)
def read_models_page(request: Request) -> HTMLResponse:
    """The pretrained-model page: a typed sentence, every layer's and head's attention."""
    return templates.TemplateResponse(request, "models.html", {})


DOCS_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
"""The files of fastapi-offline's static folder served under /static/vendor/docs/."""
DOCS_VENDOR = "/static/vendor/docs"
INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


@lru_cache
def docs_assets_dir() -> Path:
    """Swagger UI's and ReDoc's files as shipped in the fastapi-offline package.

    Raises:
        FileNotFoundError: if the installed package lacks one of :data:`DOCS_ASSETS`.
    """
    folder = Path(fastapi_offline.__file__).resolve().parent / "static"
    missing = [name for name in DOCS_ASSETS if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{missing} not found in {folder}; reinstall fastapi-offline")
    return folder


def _docs_page(page: HTMLResponse) -> HTMLResponse:
    """``page`` with a CSP allowing only this server and the page's own inline scripts."""
    body = bytes(page.body).decode()
    policy = docs_content_security_policy(INLINE_SCRIPT.findall(body))
    return HTMLResponse(body, headers={"Content-Security-Policy": policy})


@router.get("/docs", include_in_schema=False)
def read_swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI for the API, its files served by this server (FastAPI's self-hosting recipe).

    The online validator badge is off (``validatorUrl: null``): it would load an image
    from validator.swagger.io.
    """
    root = request.scope.get("root_path", "")
    return _docs_page(
        get_swagger_ui_html(
            openapi_url=f"{root}{request.app.openapi_url}",
            title=f"{request.app.title} - Swagger UI",
            swagger_js_url=f"{root}{DOCS_VENDOR}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_VENDOR}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_VENDOR}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},
        )
    )


@router.get("/redoc", include_in_schema=False)
def read_redoc(request: Request) -> HTMLResponse:
    """ReDoc for the API, its script served by this server, without Google Fonts."""
    root = request.scope.get("root_path", "")
    return _docs_page(
        get_redoc_html(
            openapi_url=f"{root}{request.app.openapi_url}",
            title=f"{request.app.title} - ReDoc",
            redoc_js_url=f"{root}{DOCS_VENDOR}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{DOCS_VENDOR}/favicon.png",
            with_google_fonts=False,
        )
    )


@router.get(DOCS_VENDOR + "/{name}", include_in_schema=False)
def read_docs_asset(name: str) -> FileResponse:
    """One of :data:`DOCS_ASSETS`, from fastapi-offline's copy (no CDN).

    Raises:
        HTTPException: 404 for any other name (no path from the user reaches the disk).
    """
    media_type = DOCS_ASSETS.get(name)
    if media_type is None:
        raise HTTPException(status_code=404, detail=f"no docs asset named {name!r}")
    return FileResponse(
        docs_assets_dir() / name,
        media_type=media_type,
        headers={"Cache-Control": "public, max-age=86400"},
    )


@router.get("/static/vendor/plotly.min.js", include_in_schema=False)
def read_plotly_js() -> FileResponse:
    """Plotly.js, served from the plotly package's own copy (no CDN)."""
    return FileResponse(
        plotly_js_path(),
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=86400"},
    )
