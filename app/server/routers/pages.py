"""The pages (/, /models), the API docs (/docs, /redoc) and the vendored scripts they load.

Plotly.js is a partial bundle vendored in static/vendor: Plotly.js's core with only the
heatmap and bar traces, built with esbuild from the npm package plotly.js at the version of
the plotly Python package (``make vendor-plotly``), served gzip-compressed and cacheable for a
year.
Swagger UI and ReDoc come from fastapi-offline, which ships the files FastAPI's own
docs pages would load from a CDN. Nothing is fetched from outside this server, so
every page works offline.
"""

from __future__ import annotations

import gzip
import hashlib
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import APIRouter, HTTPException, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from plotly.offline import get_plotlyjs_version

from ...pretrained.methods import GRADIENT_METHODS, METHOD_LABELS, page_methods
from ...pretrained.results import TOP_K
from ...resources import STATIC_DIR, TEMPLATES_DIR
from ..dependencies import SettingsDep
from ..limits import (
    MAX_DECODING_TOKENS,
    MAX_LAYERS,
    MAX_MODEL_DISPLAY_SIZE,
    MAX_NEW_TOKENS,
    MAX_TEMPERATURE,
)
from ..middleware import docs_content_security_policy
from ..presets import DEFAULT_PRESET, PRESETS
from ..settings import Settings

templates = Jinja2Templates(directory=TEMPLATES_DIR)

router = APIRouter(tags=["page"])


PLOTLY_BUNDLE = "plotly-attnviz.min.js"
"""The page's Plotly.js: the core (scatter, axes, shapes, colour bars, hover, image export)
with the heatmap and bar traces only (scripts/plotly_bundle.js), 1.2 MB against the full
bundle's 4.8 MB, and ready about 6x sooner in Chromium here (0.33 s against 2.0 s; the
cartesian dist bundle, 1.5 MB, took 0.9 s). Its MIT licence is
static/vendor/plotly-attnviz.LICENSE."""
PLOTLY_URL = "/static/vendor/" + PLOTLY_BUNDLE
PLOTLY_HEADER = re.compile(rb"plotly\.js \(attnviz: [a-z, ]+ - minified\) v(\d+\.\d+\.\d+)")
LONG_CACHE = "public, max-age=31536000, immutable"
"""For versioned URLs (``?v=<version>``): a new bundle comes with a new URL."""


def bundled_plotly_version() -> str:
    """The plotly.js version the installed plotly package ships, e.g. "4.1.1".

    It is the one exports embed, and the one the vendored bundle must match.
    """
    return str(get_plotlyjs_version())


@lru_cache
def plotly_bundle() -> tuple[bytes, bytes, str, str]:
    """The vendored bundle: (its bytes, the same gzip-compressed, its version, its ETag).

    Raises:
        FileNotFoundError: if static/vendor lacks the bundle (run ``make vendor-plotly``).
        ValueError: if its header names no plotly.js version.
    """
    path = STATIC_DIR / "vendor" / PLOTLY_BUNDLE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run `make vendor-plotly`")
    data = path.read_bytes()
    match = PLOTLY_HEADER.search(data[:300])
    if match is None:
        raise ValueError(f"{path} does not start with a plotly.js (attnviz) header")
    version = match.group(1).decode()
    etag = f'"{version}-{hashlib.sha256(data).hexdigest()[:16]}"'
    return data, gzip.compress(data, compresslevel=9, mtime=0), version, etag


def page_context() -> dict[str, Any]:
    """Template values every page needs.

    The versioned Plotly.js URL, and the shared script modules (static/js/lib/,
    static/js/plots/) to preload with the page's own.
    """
    return {
        "plotly_url": f"{PLOTLY_URL}?v={plotly_bundle()[2]}",
        "shared_modules": shared_modules(),
    }


@lru_cache(maxsize=1)
def shared_modules() -> tuple[str, ...]:
    """The URLs of the modules both pages import through api.js and heatmap.js."""
    js = STATIC_DIR / "js"
    return tuple(
        f"/static/js/{path.relative_to(js).as_posix()}"
        for folder in ("lib", "plots")
        for path in sorted((js / folder).glob("*.js"))
    )


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
            "lesson_limits": {"decoding_tokens": MAX_DECODING_TOKENS},
            **page_context(),
        },
    )


@router.get("/models", response_class=HTMLResponse, include_in_schema=False)
def read_models_page(request: Request, settings: SettingsDep) -> HTMLResponse:
    """The pretrained-model page: a typed sentence, every layer's and head's attention."""
    context = {**models_page(settings), **page_context()}
    return templates.TemplateResponse(request, "models.html", context)


def models_page(settings: Settings) -> dict[str, Any]:
    """What /models takes from the server, not repeated in its script.

    The methods on offer, as the method registry describes them
    (:func:`attnviz.pretrained.methods.page_methods`: label, note, citation, what one
    number is, per head or gradient, the views that draw it), and the request schema's
    bounds of its inputs, and the largest file of exact maps the server sends
    (ATTNVIZ_MAX_DOWNLOAD_BYTES).
    """
    return {
        "methods": METHOD_LABELS,
        "limits": {"max_new_tokens": MAX_NEW_TOKENS, "max_temperature": MAX_TEMPERATURE},
        "config": {
            "methods": list(METHOD_LABELS),
            "gradient_methods": sorted(GRADIENT_METHODS),
            "method_specs": page_methods(),
            "max_new_tokens": MAX_NEW_TOKENS,
            "max_display_size": MAX_MODEL_DISPLAY_SIZE,
            "max_top_k": TOP_K,
            "max_download_bytes": settings.max_download_bytes,
        },
    }


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


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` header admits gzip (``gzip`` or ``*``, not ``q=0``)."""
    for part in accept_encoding.split(","):
        name, _, params = part.partition(";")
        refused = re.fullmatch(r"q=0(\.0*)?", params.replace(" ", "").lower())
        if name.strip().lower() in ("gzip", "*") and refused is None:
            return True
    return False


@router.get(PLOTLY_URL, include_in_schema=False)
def read_plotly_js(request: Request) -> Response:
    """The vendored Plotly.js bundle, gzip-compressed and cacheable for a year.

    Compressed when the client accepts gzip (about 0.5 MB on the wire instead of 1.5 MB);
    the pages load it with its version in the URL. A matching ``If-None-Match`` gets a 304.
    """
    data, compressed, _, etag = plotly_bundle()
    headers = {"Cache-Control": LONG_CACHE, "ETag": etag, "Vary": "Accept-Encoding"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    if accepts_gzip(request.headers.get("accept-encoding", "")):
        headers["Content-Encoding"] = "gzip"
        data = compressed
    return Response(data, media_type="text/javascript", headers=headers)
