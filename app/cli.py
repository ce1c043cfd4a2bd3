"""The ``attnviz`` command: serve, compute, export, models, atlas.

    attnviz serve [--host H] [--port P] [--workers N] [--reload]
    attnviz compute (--json FILE | --sequence TEXT ...) [options] [--output FILE]
    attnviz export  (--json FILE | --sequence TEXT ...) [options] --output FILE
    attnviz export  --model NAME --text TEXT [--layer L [--head H]] [--method M] --output FILE
    attnviz models  (load the pretrained models the server would offer; list them)
    attnviz atlas   MODEL --corpus FILE --out DIR [--shards N] [--top-k K] [--max-tokens T]
    attnviz --version

``compute`` and ``export`` take the same inputs as POST /api/v1/attention, from flags
or from a JSON file of that request (flags then override it). A ``--sequence`` whose
tokens are all integers is token ids; otherwise it is words (as on the page).
``export --model`` runs a pretrained model on ``--text`` instead (:func:`attnviz.show`).
The output's suffix chooses the format: .html (standalone, offline), .png, .svg or .pdf.
``atlas`` scores every head of a text model over a corpus file (.txt, a passage a line,
or .jsonl with a ``text`` field), keeping each head's best passages
(:mod:`attnviz.pretrained.atlas.shards`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, cast

from pydantic import ValidationError

from .attention.engine import DEVICE_NAMES
from .attention.masks import MASK_NAMES
from .pretrained.methods import DRAWN_METHODS

EXPORT_SUFFIXES = (".html", ".htm", ".png", ".svg", ".pdf")
"""What ``export --output`` writes, by the file's suffix."""


def plain_text(text: str) -> str:
    """A docstring for a terminal: its reStructuredText markup taken out.

    ``code`` becomes code, :func:`attnviz.show` becomes attnviz.show.
    """
    import re

    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return re.sub(r"``([^`]+)``", r"\1", text)


class _DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in --help: argparse's, unless its help already says one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default:" in text:
            return text
        return super()._get_help_string(action) or text


def _input_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", type=Path, help="a request body as in POST /api/v1/attention (default: none)"
    )
    parser.add_argument(
        "--sequence", action="append", default=[], help="one sequence (repeat the flag for a batch)"
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        help="one target sequence, for cross attention (repeatable); with export --model, "
        "an encoder-decoder's decoder text",
    )
    from .server.schemas import AttentionRequest

    fields = AttentionRequest.model_fields
    for flag, kind, choices, what in (
        ("--d-model", int, None, "model width d_model"),
        ("--num-heads", int, None, "heads"),
        ("--seed", int, None, "the weights' seed"),
        ("--mask", str, MASK_NAMES, "mask"),
        ("--pad-id", int, None, "padding id"),
        ("--vocab-size", int, None, "vocabulary size"),
        ("--device", str, DEVICE_NAMES, "where to compute"),
    ):
        name = flag[2:].replace("-", "_")
        # Left out, the field is the request's (--json) or the API's default, shown here.
        parser.add_argument(
            flag,
            type=kind,
            choices=choices,
            default=argparse.SUPPRESS,
            help=f"{what} (default: {fields[name].default!s}, or --json's)",
        )
    parser.add_argument(
        "--output", "-o", type=Path, help="write here instead of stdout (default: stdout)"
    )


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
        value = getattr(args, name, None)
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
    """Serve the page and the API; ``--model`` models come first (the default).

    With uvicorn, or with ``--ray`` on Ray Serve (:func:`attnviz.server.ray_serve.serve_on_ray`:
    ``--replicas`` replicas of ``--num-cpus`` CPUs and ``--num-gpus`` GPUs each).
    """
    ray_only = {"replicas": args.replicas, "num_cpus": args.num_cpus, "num_gpus": args.num_gpus}
    if args.ray is None:
        given = [f"--{k.replace('_', '-')}" for k, v in ray_only.items() if v is not None]
        if given:
            verb = "needs" if len(given) == 1 else "need"
            raise SystemExit(f"attnviz: {' and '.join(given)} {verb} --ray")
        _name_models(args.model)
        serve(args.host, args.port, args.workers, args.reload)
        return
    if args.workers != 1 or args.reload:
        raise SystemExit("attnviz: with --ray, --replicas replaces --workers (and no --reload)")
    _name_models(args.model)  # the replicas get ATTNVIZ_MODELS with every ATTNVIZ_* setting
    from .server.ray_serve import serve_on_ray
    from .server.settings import get_settings

    settings = get_settings()
    try:
        serve_on_ray(
            args.ray or None,
            replicas=1 if args.replicas is None else args.replicas,
            host=args.host or settings.host,
            port=args.port or settings.port,
            num_cpus=1 if args.num_cpus is None else args.num_cpus,
            num_gpus=args.num_gpus or 0,
        )
    except (ValueError, ImportError, ConnectionError, RuntimeError) as error:
        raise SystemExit(f"attnviz: {error}") from None


def check_model_names(names: list[str], where: str) -> None:
    """Refuse at once (:func:`usage_error`, exit 2) a name no model can have.

    A name that is neither a packaged model, an existing path nor a Hugging Face id
    (:func:`attnviz.pretrained.registry.check_model_name`): checked before anything is
    loaded or started, so ``serve --model org/name/../../x`` stops in a moment with the
    rule, not after the server's start-up. ``where``: the option or setting named.
    """
    if not names:
        return
    from .pretrained.model import ModelFormatError
    from .pretrained.registry import check_model_name

    for name in names:
        try:
            check_model_name(name)
        except ModelFormatError as error:
            usage_error(f"{where}: {str(error).removeprefix('ATTNVIZ_MODELS: ')}")


def _name_models(models: list[str] | None) -> None:
    """Add ``--model`` values to ATTNVIZ_MODELS, ahead of what it lists (every worker reads it).

    Every name, given or listed, is checked first (:func:`check_model_names`).

    Raises:
        SystemExit: ATTNVIZ_MODELS is not a JSON list of strings, or a name is malformed
            (exit 2).
    """
    import json
    import os

    from .server.settings import get_settings

    try:
        listed = json.loads(os.environ.get("ATTNVIZ_MODELS") or "[]")
    except json.JSONDecodeError as error:
        usage_error(f"ATTNVIZ_MODELS is not JSON: {error}")
    if not isinstance(listed, list) or not all(isinstance(m, str) for m in listed):
        usage_error("ATTNVIZ_MODELS must be a JSON list of model names")
    check_model_names(models or [], "--model")
    check_model_names(listed, "ATTNVIZ_MODELS")
    if not models:
        return
    named = [*models, *(m for m in listed if m not in models)]
    os.environ["ATTNVIZ_MODELS"] = json.dumps(named)
    get_settings.cache_clear()


def cmd_compute(args: argparse.Namespace) -> None:
    """Write the API's response JSON for the request."""
    from fastapi import HTTPException

    from .server.payloads.attention import attention_payload
    from .server.transport import stream_json

    request = build_request(args)
    try:
        payload = attention_payload(request)
    except HTTPException as error:  # the engine's errors, naming the field
        details = cast(list[dict[str, Any]], error.detail)
        raise _invalid_input([(d["loc"][1:], d["msg"]) for d in details]) from None
    _write(b"".join(stream_json(payload)), args.output)


def cmd_export(args: argparse.Namespace) -> None:
    """Write the heatmaps as a standalone HTML file (Plotly.js inlined) or a PNG, SVG, PDF."""
    from .attention import AttentionInputError, compute_attention
    from .views.figure import attention_figure
    from .views.notebook import AttentionView
    from .views.show import show

    if args.output is None or args.output.suffix.lower() not in EXPORT_SUFFIXES:
        raise SystemExit("attnviz: export needs --output FILE.html (or .png, .svg, .pdf)")
    if (args.model is None) != (args.text is None):
        raise SystemExit("attnviz: export --model NAME needs --text TEXT, and --text a --model")
    if args.head is not None and args.layer is None:
        raise SystemExit("attnviz: --head needs --layer")
    if args.model is not None:
        check_model_names([args.model], "--model")
    try:
        if args.model is not None:
            view = show(
                args.text,
                args.model,
                layer=args.layer,
                method=args.method or DRAWN_METHODS[0],
                target=args.target[0] if args.target else None,
                device=getattr(args, "device", "auto"),
            )
            if args.head is not None:
                view = _one_head(view, args.head)
        else:
            if args.layer is not None or args.method not in (None, DRAWN_METHODS[0]):
                raise SystemExit("attnviz: --layer, --head and --method are for --model")
            request = build_request(args)
            result = compute_attention(
                request.sequences,
                targets=request.targets,
                mask=request.mask,
                dtype=request.dtype,
                mask_fill=float(request.mask_fill),
                scale=request.scale,
                config=request.layer(),
            )
            figure = attention_figure(result, sequence_index=args.sequence_index)
            view = AttentionView(figure, result.attn_weights[args.sequence_index][None].numpy())
    except (AttentionInputError, IndexError, ValueError) as error:
        raise SystemExit(f"attnviz: {error}") from None
    try:
        view.save(args.output, interactive=False)  # the figure, as PNG/SVG/PDF are
    except RuntimeError as error:
        raise SystemExit(f"attnviz: {error}") from None


def _one_head(view: Any, head: int) -> Any:
    """A head view's one head, as a view of its own."""
    from .views.notebook import head_view

    heads = view.maps.shape[1]
    if not 0 <= head < heads:
        raise SystemExit(f"attnviz: --head {head} is not below {heads}")
    layout = view.figure.layout
    query = list(layout.yaxis.ticktext)
    key = list(layout.xaxis.ticktext)
    return head_view(
        view.maps[:, head : head + 1],
        key,
        target_tokens=query if query != key else None,
        title=f"{layout.title.text}, head {head}",
    )


def cmd_models(args: argparse.Namespace) -> None:
    """Load the pretrained models the server would offer (filling the GGUF cache); list them.

    Exits 1 when a model failed to load.
    """
    from .pretrained import ModelRegistry
    from .server.settings import get_settings

    _name_models(args.model)
    settings = get_settings()
    registry = ModelRegistry()
    registry.configure(
        settings.model_dirs,
        models=settings.models,
        packaged=settings.packaged_models,
        cache_dir=settings.cache_dir,
        placement=settings.placement(),
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


def cmd_atlas(args: argparse.Namespace) -> None:
    """Score every head over a corpus and write the atlas and its examples.

    In one process (in ``--shards`` shards), or with ``--ray`` on a Ray Data pool of
    ``--workers`` actors that each hold the model (:mod:`attnviz.pretrained.atlas.on_ray`);
    either way the shards' sums merge exactly. ``DIR/atlas.json`` (the scores in the shape
    of POST /api/v1/models/heads's ``atlas``, plus ``top_k``, ``examples`` and the
    ``passages`` they name), ``DIR/scores.csv`` (a row per head), ``DIR/examples.csv`` (a
    row per kept passage, its text included) and the same two tables as Parquet
    (``scores.parquet``, ``examples.parquet``) where pyarrow is installed (the ray extra).
    A progress bar counts the forward passes on stderr.
    """
    import functools
    import time

    from tqdm import tqdm  # the pretrained extra's (huggingface_hub's) progress bar

    from .attention import AttentionInputError
    from .pretrained.atlas import plan_atlas
    from .pretrained.atlas.shards import atlas_of, merged, read_corpus, run_shard
    from .pretrained.atlas.shards import shards as split
    from .views.show import text_model

    if args.ray is None and (args.workers is not None or args.gpus_per_worker):
        raise SystemExit("attnviz: --workers and --gpus-per-worker need --ray")
    for option in ("shards", "workers", "threads", "top_k", "max_tokens"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise SystemExit(f"attnviz: --{option.replace('_', '-')}: {value} is below 1")
    check_model_names([args.model], "MODEL")
    made = _writable_folder(args.out)  # before any pass: a bad --out loses no work
    started = time.perf_counter()
    options = {"repeat_length": None, "max_tokens": args.max_tokens, "device": args.device}
    try:
        texts = read_corpus(args.corpus)
        if args.ray is not None:
            from .pretrained.atlas.on_ray import connect

            connect(args.ray)  # before the model: the driver's threads are its own
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        model = text_model(args.model)
        plan = plan_atlas(model, texts, **options)
        with tqdm(total=len(plan.passes), unit="pass", desc="atlas", file=sys.stderr) as bar:
            if args.ray is not None:
                from .pretrained.atlas.on_ray import run_on_ray

                shard = run_on_ray(
                    plan,
                    functools.partial(text_model, args.model),
                    options,
                    workers=args.workers or 1,
                    threads=args.threads,
                    gpus=args.gpus_per_worker,
                    top_k=args.top_k,
                    progress=bar.update,
                )
                how = f"{args.workers or 1} Ray workers"
            else:
                parts = [
                    run_shard(plan, indices, top_k=args.top_k, progress=bar.update)
                    for indices in split(args.shards, len(plan.passes))
                ]
                shard = merged(parts)
                how = f"{len(parts)} shards"
    except AttentionInputError as error:
        _forget(made)
        raise SystemExit(f"attnviz: {error}") from None
    except (ImportError, ConnectionError) as error:
        _forget(made)
        raise SystemExit(f"attnviz: {error}") from None
    except BaseException:
        _forget(made)
        raise
    scores = atlas_of(plan, shard, (time.perf_counter() - started) * 1000.0)
    written = _write_atlas(scores, args.out)
    print(
        f"{scores.model}: {scores.num_layers} layers x {scores.num_heads} heads over "
        f"{len(texts)} passages ({len(plan.passes)} passes, {how}) in "
        f"{scores.compute_ms / 1000:.1f} s; wrote {args.out}/: {', '.join(written)}"
    )


def usage_error(message: str) -> NoReturn:
    """Say ``attnviz: message`` on stderr and exit 2, as argparse does for a usage error."""
    print(f"attnviz: {message}", file=sys.stderr)
    raise SystemExit(2)


def _writable_folder(out: Path) -> Path | None:
    """Make sure ``out`` is a folder files can be written in, before any work.

    Returns:
        ``out`` when this call made it (:func:`_forget` removes it if the run fails before
        writing), None when it was there.

    Raises:
        SystemExit: (:func:`usage_error`, exit 2) ``out`` is a file, lies under a file, or
            cannot be made or written in (``/proc/x``, a read-only disk), with the reason.
    """
    import tempfile

    if out.exists() and not out.is_dir():
        usage_error(f"--out: {out} is a file, not a folder")
    existed = out.is_dir()
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".attnviz-probe-"):
            pass
    except OSError as error:
        if not existed:
            _forget(out)
        usage_error(f"--out: cannot write in {out}: {error.strerror or type(error).__name__}")
    return None if existed else out


def _forget(made: Path | None) -> None:
    """Remove the --out folder this run made, if it is there and still empty."""
    if made is not None and made.is_dir() and not any(made.iterdir()):
        made.rmdir()


def _write_atlas(scores: Any, out: Path) -> list[str]:
    """Write ``scores`` (a HeadScores with examples) into ``out``; the names written.

    atlas.json, scores.csv and examples.csv; scores.parquet and examples.parquet too
    where pyarrow is installed (the ray extra). Each file is written under a temporary
    name in ``out`` and renamed into place (``os.replace``): a file is either the old one
    or the whole new one, never half written.
    """
    import csv
    import io
    import os

    def atomically(name: str, data: bytes) -> None:
        part = out / f".{name}.part"
        part.write_bytes(data)
        os.replace(part, out / name)

    tables = {"scores": scores.to_rows(), "examples": scores.example_rows()}
    out.mkdir(parents=True, exist_ok=True)
    atomically("atlas.json", json.dumps(scores.to_dict(), ensure_ascii=False).encode())
    written = ["atlas.json"]
    for name, rows in tables.items():
        text = io.StringIO(newline="")
        writer = csv.DictWriter(
            text, fieldnames=list(rows[0]) if rows else ["score"], lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(rows)
        atomically(f"{name}.csv", text.getvalue().encode("utf-8"))
        written.append(f"{name}.csv")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return written
    for name, rows in tables.items():
        buffer = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist(rows), buffer)
        atomically(f"{name}.parquet", buffer.getvalue().to_pybytes())
        written.append(f"{name}.parquet")
    return written


class _CommandsShown(_DefaultsShown, argparse.RawDescriptionHelpFormatter):
    """The main help: the usage lines of the description kept as written."""


def parser() -> argparse.ArgumentParser:
    """The argument parser of the ``attnviz`` command."""
    from . import __version__

    formatter = _DefaultsShown
    main_parser = argparse.ArgumentParser(
        prog="attnviz",
        description=plain_text(__doc__),
        formatter_class=_CommandsShown,
        epilog="attnviz COMMAND --help shows one command's options.\n"
        "Settings come from ATTNVIZ_* environment variables (docs/deploy.md).",
    )
    main_parser.add_argument("--version", action="version", version=f"attnviz {__version__}")
    commands = main_parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve", help="serve the page and the API", formatter_class=formatter
    )
    serve.add_argument(
        "--host", default=None, help="interface (default: ATTNVIZ_HOST or 127.0.0.1)"
    )
    serve.add_argument(
        "--port", type=int, default=None, help="port (default: ATTNVIZ_PORT or 8000)"
    )
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    serve.add_argument(
        "--model",
        action="append",
        metavar="ID",
        help="a model to offer, repeatable, the first the default: a Hugging Face id "
        "(gpt2, org/name, org/name@revision; from the local cache with HF_HUB_OFFLINE=1), "
        "a packaged name or a local directory (added to ATTNVIZ_MODELS)",
    )
    serve.add_argument("--reload", action="store_true", help="restart on code changes")
    serve.add_argument(
        "--ray", nargs="?", const="", default=None, metavar="ADDRESS",
        help="serve on Ray Serve: replicas on the cluster at ADDRESS ('auto', HOST:6379 or "
        "ray://HOST:10001) or on a local Ray started for the purpose (no ADDRESS), behind "
        "Serve's HTTP proxy on --host/--port; needs pip install 'attnviz[ray]'",
    )  # fmt: skip
    serve.add_argument(
        "--replicas", type=int, default=None, help="with --ray: replicas (default 1)"
    )
    serve.add_argument(
        "--num-cpus", type=float, default=None,
        help="with --ray: CPUs each replica reserves, and its torch threads (default 1)",
    )  # fmt: skip
    serve.add_argument(
        "--num-gpus", type=float, default=None,
        help="with --ray: GPUs each replica reserves; over 1, one placement group on one "
        "node, the model placed across them by ATTNVIZ_DEVICE_MAP (default 0)",
    )  # fmt: skip
    serve.set_defaults(run=cmd_serve)

    compute = commands.add_parser(
        "compute", help="write the attention response JSON", formatter_class=formatter
    )
    _input_arguments(compute)
    compute.set_defaults(run=cmd_compute)

    export = commands.add_parser(
        "export",
        help="write the heatmaps: standalone HTML (offline), PNG, SVG or PDF",
        formatter_class=formatter,
    )
    _input_arguments(export)
    export.add_argument("--sequence-index", type=int, default=0, help="which sequence to draw")
    export.add_argument(
        "--model",
        default=None,
        help="a pretrained model (a packaged name such as all-MiniLM-L6-v2, a local "
        "Hugging Face directory or .gguf file, or a Hugging Face id such as gpt2 or "
        "org/name@revision) to run on --text instead of the toy engine",
    )
    export.add_argument("--text", default=None, help="the text for --model")
    export.add_argument(
        "--layer", type=int, default=None, help="one layer's heads (default: every layer)"
    )
    export.add_argument(
        "--head", type=int, default=None, help="with --layer, that head alone (default: all)"
    )
    export.add_argument(
        "--method",
        choices=DRAWN_METHODS,
        default=None,
        help="with --model: the weights (attention, the default), or norm-based attention "
        "||alpha f(x)|| (norm, Kobayashi et al. 2020)",
    )
    export.set_defaults(run=cmd_export)

    models = commands.add_parser(
        "models",
        formatter_class=formatter,
        help="load and list the pretrained models (ATTNVIZ_MODELS, ATTNVIZ_PACKAGED_MODELS, "
        "ATTNVIZ_MODEL_DIRS), filling the cache of GGUF models (ATTNVIZ_CACHE_DIR)",
    )
    models.add_argument(
        "--model",
        action="append",
        metavar="ID",
        help="a model to load too, repeatable: a Hugging Face id, a packaged name or a "
        "local directory (added to ATTNVIZ_MODELS)",
    )
    models.set_defaults(run=cmd_models)

    atlas = commands.add_parser(
        "atlas",
        formatter_class=formatter,
        help="score every head of a text model over a corpus and keep each head's best "
        "passages (the head atlas of /models, at scale)",
    )
    atlas.add_argument(
        "model", metavar="MODEL", help="a packaged name, a local directory or a Hugging Face id"
    )
    atlas.add_argument(
        "--corpus", type=Path, required=True,
        help="the passages: .txt (one a line), .jsonl (a 'text' field a line) or .parquet "
        "(a 'text' column)",
    )  # fmt: skip
    atlas.add_argument("--out", type=Path, required=True, help="the folder written")
    atlas.add_argument(
        "--shards", type=int, default=1,
        help="in one process: run the passes in this many shards, merged exactly",
    )  # fmt: skip
    atlas.add_argument(
        "--ray", nargs="?", const="", default=None, metavar="ADDRESS",
        help="run on a Ray Data pool of actors that each hold the model: on the cluster at "
        "ADDRESS ('auto', HOST:PORT or ray://HOST:10001), or on a local Ray started for the "
        "purpose (no ADDRESS); needs pip install 'attnviz[ray]'",
    )  # fmt: skip
    atlas.add_argument(
        "--workers", type=int, default=None, help="with --ray: actors in the pool (default 1)"
    )
    atlas.add_argument(
        "--threads", type=int, default=None,
        help="torch threads (with --ray: per worker, and the CPUs each reserves; default "
        "this machine's cores over the workers)",
    )  # fmt: skip
    atlas.add_argument(
        "--gpus-per-worker", type=float, default=0,
        help="with --ray: GPUs each actor reserves; its device map places the model within them",
    )  # fmt: skip
    atlas.add_argument("--top-k", type=int, default=8, help="passages kept per head and score")
    atlas.add_argument(
        "--max-tokens", type=int, default=256, help="tokens per passage at most (cut)"
    )
    atlas.add_argument("--device", choices=DEVICE_NAMES, default="auto")
    atlas.set_defaults(run=cmd_atlas)
    for action in commands._choices_actions:  # each command's --help opens with its summary
        command = commands.choices[action.dest]
        command.description = command.description or f"attnviz {action.dest}: {action.help}."
    return main_parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``attnviz`` console script."""
    args = parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
