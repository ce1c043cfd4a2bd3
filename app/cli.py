"""The ``attnviz`` command: serve, compute, export.

    attnviz serve [--host H] [--port P] [--workers N] [--reload]
    attnviz compute (--json FILE | --sequence TEXT ...) [options] [--output FILE]
    attnviz export  (--json FILE | --sequence TEXT ...) [options] --output FILE.html
    attnviz models  (load the pretrained models the server would offer; list them)

``compute`` and ``export`` take the same inputs as POST /api/v1/attention, from flags
or from a JSON file of that request (flags then override it). A ``--sequence`` whose
tokens are all integers is token ids; otherwise it is words (as on the page).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from .attention.engine import DEVICE_NAMES
from .attention.masks import MASK_NAMES


def _input_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, help="a request body as in POST /api/v1/attention")
    parser.add_argument(
        "--sequence", action="append", default=[], help="one sequence (repeat the flag for a batch)"
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        help="one target sequence, for cross attention (repeatable)",
    )
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--num-heads", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--mask", choices=MASK_NAMES)
    parser.add_argument("--pad-id", type=int)
    parser.add_argument("--vocab-size", type=int)
    parser.add_argument("--device", choices=DEVICE_NAMES)
    parser.add_argument("--output", "-o", type=Path, help="write here instead of stdout")


def _parse_sequence(text: str) -> list[int] | str:
    tokens = text.split()
    if tokens and all(t.lstrip("-").isdigit() for t in tokens):
        return [int(t) for t in tokens]
    return text


def build_request(args: argparse.Namespace) -> Any:
    """The AttentionRequest the flags (and --json file) describe.

    Raises:
        SystemExit: with a message naming the field, for input the API would refuse.
    """
    from .server.schemas import AttentionRequest

    body: dict[str, Any] = {}
    if args.json is not None:
        body = json.loads(args.json.read_text(encoding="utf-8"))
    if args.sequence:
        body["sequences"] = [_parse_sequence(s) for s in args.sequence]
    if args.target:
        body["targets"] = [_parse_sequence(s) for s in args.target]
    for name in ("d_model", "num_heads", "seed", "mask", "pad_id", "vocab_size", "device"):
        value = getattr(args, name)
        if value is not None:
            body[name] = value
    try:
        return AttentionRequest.model_validate(body)
    except ValidationError as error:
        raise _invalid_input([(e["loc"], e["msg"]) for e in error.errors()]) from None


def _invalid_input(problems: list[tuple[Sequence[Any], str]]) -> SystemExit:
    """The exit for refused input: ``attnviz: invalid input: field: message; ...``."""
    text = "; ".join(f"{'.'.join(str(part) for part in loc)}: {msg}" for loc, msg in problems)
    return SystemExit(f"attnviz: invalid input: {text}")


def _write(data: bytes | str, output: Path | None) -> None:
    if output is None:
        if isinstance(data, str):
            sys.stdout.write(data)
        else:
            sys.stdout.buffer.write(data)
        return
    if isinstance(data, str):
        output.write_text(data, encoding="utf-8")
    else:
        output.write_bytes(data)


def serve(
    host: str | None = None, port: int | None = None, workers: int = 1, reload: bool = False
) -> None:
    """Serve the page and the API with uvicorn (``python -m attnviz``, ``attnviz serve``).

    Args:
        host, port: where to listen; None takes ATTNVIZ_HOST / ATTNVIZ_PORT
            (default 127.0.0.1:8000).
        workers: uvicorn worker processes.
        reload: restart on code changes.
    """
    import uvicorn

    from .server.settings import get_settings

    settings = get_settings()
    # AttnViz writes its own JSON access log (server.middleware); uvicorn's would repeat it.
    uvicorn.run(
        "attnviz.server.main:app",
        host=host or settings.host,
        port=port or settings.port,
        workers=workers,
        reload=reload,
        access_log=False,
    )


def cmd_serve(args: argparse.Namespace) -> None:
    """Serve the page and the API with uvicorn."""
    serve(args.host, args.port, args.workers, args.reload)


def cmd_compute(args: argparse.Namespace) -> None:
    """Write the API's response JSON for the request."""
    from fastapi import HTTPException

    from .server.routers.attention import attention_payload
    from .server.transport import stream_json

    request = build_request(args)
    try:
        payload = attention_payload(request)
    except HTTPException as error:  # the engine's errors, naming the field
        details = cast(list[dict[str, Any]], error.detail)
        raise _invalid_input([(d["loc"][1:], d["msg"]) for d in details]) from None
    _write(b"".join(stream_json(payload)), args.output)


def cmd_export(args: argparse.Namespace) -> None:
    """Write a self-contained HTML file (Plotly.js inlined) of the per-head heatmaps."""
    from .attention import AttentionInputError, compute_attention
    from .views.figure import attention_figure

    request = build_request(args)
    if args.output is None or args.output.suffix.lower() not in (".html", ".htm", ".png", ".svg"):
        raise SystemExit("attnviz: export needs --output FILE.html (or .png / .svg)")
    try:
        result = compute_attention(
            request.sequences,
            targets=request.targets,
            mask=request.mask,
            dtype=request.dtype,
            mask_fill=float(request.mask_fill),
            scale=request.scale,
            config=request.layer(),
        )
    except AttentionInputError as error:
        raise SystemExit(f"attnviz: {error}") from None
    figure = attention_figure(result, sequence_index=args.sequence_index)
    if args.output.suffix.lower() in (".png", ".svg"):
        try:
            figure.write_image(args.output)
        except (ImportError, ValueError) as error:
            raise SystemExit(
                f"attnviz: PNG/SVG export needs kaleido (pip install 'attnviz[export]', or "
                f"pip install -e '.[export]' in a checkout): {error}"
            ) from None
        return
    figure.write_html(args.output, include_plotlyjs=True, full_html=True)


def cmd_models(args: argparse.Namespace) -> None:
    """Load the pretrained models the server would offer (filling the GGUF cache); list them.

    Exits 1 when a model failed to load.
    """
    from .pretrained import ModelRegistry
    from .server.settings import get_settings

    settings = get_settings()
    registry = ModelRegistry()
    registry.configure(
        settings.model_dirs, packaged=settings.packaged_models, cache_dir=settings.cache_dir
    )
    registry.load()
    failed = False
    for entry in registry.entries():
        model = entry.model
        if model is None:
            failed = True
            print(f"{entry.name}: failed: {entry.error}")
            continue
        print(
            f"{entry.name}: {model.family} ({model.architecture}), {model.num_layers} layers x "
            f"{model.num_heads} heads ({model.num_key_value_heads} key/value), "
            f"loaded in {model.load_s:.1f} s from {entry.source}"
        )
    if not registry.entries():
        print("no pretrained model is installed")
    if failed:
        raise SystemExit(1)


def parser() -> argparse.ArgumentParser:
    """The argument parser of the ``attnviz`` command."""
    main_parser = argparse.ArgumentParser(prog="attnviz", description=__doc__.splitlines()[0])
    commands = main_parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve the page and the API")
    serve.add_argument("--host", help="interface (default ATTNVIZ_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default ATTNVIZ_PORT or 8000)")
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    serve.add_argument("--reload", action="store_true", help="restart on code changes")
    serve.set_defaults(run=cmd_serve)

    compute = commands.add_parser("compute", help="write the attention response JSON")
    _input_arguments(compute)
    compute.set_defaults(run=cmd_compute)

    export = commands.add_parser("export", help="write a self-contained HTML of the heatmaps")
    _input_arguments(export)
    export.add_argument("--sequence-index", type=int, default=0, help="which sequence to draw")
    export.set_defaults(run=cmd_export)

    models = commands.add_parser(
        "models",
        help="load and list the pretrained models (ATTNVIZ_PACKAGED_MODELS, "
        "ATTNVIZ_MODEL_DIRS), filling the cache of GGUF models (ATTNVIZ_CACHE_DIR)",
    )
    models.set_defaults(run=cmd_models)
    return main_parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``attnviz`` console script."""
    args = parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
