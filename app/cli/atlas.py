"""``attnviz atlas``: every head of a text model scored over a corpus, with its examples.

Every argument and the ``--out`` folder are checked before the corpus is read or the model
loaded, so a bad ``--out`` loses no work; the corpus is read a line at a time, each
passage cut to what ``--max-tokens`` can use (:mod:`attnviz.pretrained.atlas.corpus`),
with a bar for the bytes read, one for the passages tokenised and one for the passes;
the files are written atomically.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..attention.engine import DEVICE_NAMES
from .common import DefaultsShown, check_model_names, usage_error


def run(args: argparse.Namespace) -> None:
    """Score every head over a corpus and write the atlas and its examples.

    In one process (in ``--shards`` shards), or with ``--ray`` on a Ray Data pool of
    ``--workers`` actors that each hold the model (:mod:`attnviz.pretrained.atlas.on_ray`);
    either way the shards' sums merge exactly. ``DIR/atlas.json`` (the scores in the shape
    of POST /api/v1/models/heads's ``atlas``, plus ``top_k``, ``examples`` and the
    ``passages`` they name), ``DIR/scores.csv`` (a row per head), ``DIR/examples.csv`` (a
    row per kept passage, its text included) and the same two tables as Parquet
    (``scores.parquet``, ``examples.parquet``) where pyarrow is installed (the ray extra).
    Progress bars on stderr count the corpus's bytes read, the passages tokenised and the
    forward passes.
    """
    import functools
    import time

    from tqdm import tqdm  # the pretrained extra's (huggingface_hub's) progress bar

    from ..attention import AttentionInputError
    from ..pretrained.atlas import plan_atlas
    from ..pretrained.atlas.corpus import passage_chars, read_corpus
    from ..pretrained.atlas.shards import atlas_of, merged, run_shard
    from ..pretrained.atlas.shards import shards as split
    from ..views.show import text_model

    if args.ray is None and (args.workers is not None or args.gpus_per_worker):
        raise SystemExit("attnviz: --workers and --gpus-per-worker need --ray")
    least = {"shards": 1, "workers": 1, "threads": 1, "top_k": 1, "max_tokens": 2}
    for option, bound in least.items():  # before the corpus is read or the model loaded
        value = getattr(args, option)
        if value is not None and value < bound:
            raise SystemExit(f"attnviz: --{option.replace('_', '-')}: {value} is below {bound}")
    check_model_names([args.model], "MODEL")
    made = _writable_folder(args.out)  # before any pass: a bad --out loses no work
    started = time.perf_counter()
    options = {"repeat_length": None, "max_tokens": args.max_tokens, "device": args.device}
    bar = functools.partial(tqdm, file=sys.stderr, dynamic_ncols=True)
    try:
        size = args.corpus.stat().st_size if args.corpus.is_file() else None
        with bar(total=size, unit="B", unit_scale=True, desc="corpus") as reading:
            texts = read_corpus(
                args.corpus, max_chars=passage_chars(args.max_tokens), progress=reading.update
            )
        if args.ray is not None:
            from ..pretrained.atlas.on_ray import connect

            connect(args.ray)  # before the model: the driver's threads are its own
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        model = text_model(args.model)
        with bar(total=len(texts), unit="text", desc="tokens") as tokenised:
            plan = plan_atlas(model, texts, progress=tokenised.update, **options)
        with bar(total=len(plan.passes), unit="pass", desc="atlas") as passes:
            if args.ray is not None:
                from ..pretrained.atlas.on_ray import run_on_ray

                shard = run_on_ray(
                    plan,
                    functools.partial(text_model, args.model),
                    options,
                    workers=args.workers or 1,
                    threads=args.threads,
                    gpus=args.gpus_per_worker,
                    top_k=args.top_k,
                    progress=passes.update,
                )
                how = f"{args.workers or 1} Ray workers"
            else:
                parts = [
                    run_shard(plan, indices, top_k=args.top_k, progress=passes.update)
                    for indices in split(args.shards, len(plan.passes))
                ]
                shard = merged(parts)
                how = f"{len(parts)} shards"
    except (AttentionInputError, ImportError, ConnectionError) as error:
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


def _writable_folder(out: Path) -> Path | None:
    """Make sure ``out`` is a folder files can be written in, before any work.

    Returns:
        ``out`` when this call made it (:func:`_forget` removes it if the run fails before
        writing), None when it was there.

    Raises:
        SystemExit: (:func:`.common.usage_error`, exit 2) ``out`` is a file, lies under a
            file, or cannot be made or written in (``/proc/x``, a read-only disk), with
            the reason.
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


def add_parser(commands: Any) -> None:
    """``atlas`` and its options, on the main parser's subcommands."""
    parser = commands.add_parser(
        "atlas",
        formatter_class=DefaultsShown,
        help="score every head of a text model over a corpus and keep each head's best "
        "passages (the head atlas of /models, at scale)",
    )
    parser.add_argument(
        "model", metavar="MODEL", help="a packaged name, a local directory or a Hugging Face id"
    )
    parser.add_argument(
        "--corpus", type=Path, required=True,
        help="the passages: .txt (one a line), .jsonl (a 'text' field a line) or .parquet "
        "(a 'text' column), UTF-8; each cut to what --max-tokens uses while it is read",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="the folder written")
    parser.add_argument(
        "--shards", type=int, default=1,
        help="in one process: run the passes in this many shards, merged exactly",
    )  # fmt: skip
    parser.add_argument(
        "--ray", nargs="?", const="", default=None, metavar="ADDRESS",
        help="run on a Ray Data pool of actors that each hold the model: on the cluster at "
        "ADDRESS ('auto', HOST:PORT or ray://HOST:10001), or on a local Ray started for the "
        "purpose (no ADDRESS); needs pip install 'attnviz[ray]'",
    )  # fmt: skip
    parser.add_argument(
        "--workers", type=int, default=None, help="with --ray: actors in the pool (default 1)"
    )
    parser.add_argument(
        "--threads", type=int, default=None,
        help="torch threads (with --ray: per worker, and the CPUs each reserves; default "
        "this machine's cores over the workers)",
    )  # fmt: skip
    parser.add_argument(
        "--gpus-per-worker", type=float, default=0,
        help="with --ray: GPUs each actor reserves; its device map places the model within them",
    )  # fmt: skip
    parser.add_argument("--top-k", type=int, default=8, help="passages kept per head and score")
    parser.add_argument(
        "--max-tokens", type=int, default=256, help="tokens per passage at most (cut)"
    )
    parser.add_argument("--device", choices=DEVICE_NAMES, default="auto")
    parser.set_defaults(run=run)
