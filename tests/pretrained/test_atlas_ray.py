"""The atlas on a Ray Data actor pool (issue 43): exact, and a worker's failure counted once.

A local Ray (2 CPUs, no dashboard) and tiny random models with sharp heads: the pool's
atlas with 1 and 2 workers equals the one-process atlas of the same passes to 1e-9
relative, examples included; an actor whose process dies in its first batch is restarted
by Ray Data, the batch runs again, and nothing counts twice; ``attnviz atlas --ray``
writes the one-process command's files, and Parquet tables equal to its CSVs.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from attnviz.pretrained.atlas import SCORES, head_scores, plan_atlas
from attnviz.pretrained.atlas.on_ray import AtlasWorker, batch_passes, connect, run_on_ray
from attnviz.pretrained.atlas.shards import atlas_of
from attnviz.pretrained.loading import load_model_dir

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers
from tests.pretrained.test_atlas_shards import MAX_TOKENS, OPTIONS, TEXTS, TOP
from tests.pretrained.test_heads import save_sharp
from tests.support.local_ray import start_local_ray

ray = pytest.importorskip("ray", reason="the ray extra (pip install 'attnviz[ray]')")
pytestmark = [pytest.mark.slow, pytest.mark.ray]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local_ray() -> object:
    # The actors import this test module (the failing worker below): the repository root on
    # their path. Two CPUs, as the machine the suite runs on.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    start_local_ray(
        num_cpus=2, include_dashboard=False, logging_level="WARNING",
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )  # fmt: skip
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_transformers()
    return save_sharp("llama", tiny.DECODER_STYLE, tmp_path_factory.mktemp("ray") / "llama")


def one_thread_atlas(plan):  # type: ignore[no-untyped-def]
    """The one-process atlas with the actors' torch threads (1): float32 matrix products
    add in an order that depends on the thread count (about 1e-7 apart), which is no part
    of the reduction the pool is checked for."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return head_scores(plan, top_k=TOP)
    finally:
        torch.set_num_threads(threads)


def assert_same_atlas(result, one) -> None:  # type: ignore[no-untyped-def]
    for score in SCORES:
        np.testing.assert_allclose(result.scores[score], one.scores[score], rtol=1e-9, atol=0)
    assert result.examples == one.examples
    assert result.passages == one.passages


@pytest.mark.parametrize("workers", [1, 2])
def test_the_pools_atlas_is_the_one_process_atlas(
    local_ray: object, folder: Path, workers: int
) -> None:
    load = functools.partial(load_model_dir, "llama", folder)
    plan = plan_atlas(load(), TEXTS, **OPTIONS)
    shard = run_on_ray(plan, load, OPTIONS, workers=workers, threads=1, top_k=TOP)
    assert shard.passes == list(range(len(plan.passes)))
    result = atlas_of(plan, shard, 0.0)
    one = one_thread_atlas(plan)  # one process, the passes in order
    assert_same_atlas(result, one)


class CrashOnce(AtlasWorker):
    """An actor whose process dies in the first batch any actor of the pool runs.

    The first to create the file ``crashed`` beside the model's folder dies (the actors
    are started by Ray, not by the test: the folder is what they share with it).
    """

    def __init__(self, load: functools.partial, **kwargs: object) -> None:  # type: ignore[type-arg]
        super().__init__(load, **kwargs)  # type: ignore[arg-type]
        self.marker = Path(load.args[1]).parent / "crashed"

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return super().__call__(batch)
        os.write(fd, json.dumps(batch["index"].tolist()).encode())
        os.close(fd)
        os._exit(1)  # the process dies mid-batch, as on a lost node


def test_a_worker_that_dies_is_replaced_and_its_batch_counted_once(
    local_ray: object, folder: Path
) -> None:
    marker = folder.parent / "crashed"
    load = functools.partial(load_model_dir, "llama", folder)
    plan = plan_atlas(load(), TEXTS, **OPTIONS)
    counted: list[int] = []
    shard = run_on_ray(
        plan, load, OPTIONS, workers=2, threads=1, top_k=TOP, progress=counted.append,
        worker=CrashOnce,
    )  # fmt: skip
    assert marker.exists(), "no worker crashed"
    assert json.loads(marker.read_text()), "the crash lost no batch"
    assert sum(counted) == len(plan.passes)  # every pass merged once: the lost batch too
    assert_same_atlas(atlas_of(plan, shard, 0.0), one_thread_atlas(plan))


def test_batches_balance_the_workers() -> None:
    assert batch_passes(512, 2) == 32 and batch_passes(512, 8) == 8 and batch_passes(3, 4) == 1
    with pytest.raises(ImportError, match="attnviz\\[ray\\]"):
        import builtins

        real = builtins.__import__

        def no_ray(name: str, *args: object, **kwargs: object) -> object:
            if name == "ray":
                raise ImportError("No module named 'ray'")
            return real(name, *args, **kwargs)  # type: ignore[arg-type]

        builtins.__import__ = no_ray  # type: ignore[assignment]
        try:
            connect(None)
        finally:
            builtins.__import__ = real


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as file:
        return list(csv.DictReader(file))


def test_the_atlas_command_on_ray_writes_the_one_process_files(
    folder: Path, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    outs = {}
    runs = (("one", ["--threads", "1"]), ("ray", ["--ray", "--workers", "2", "--threads", "1"]))
    for name, extra in runs:
        outs[name] = tmp_path / name
        command = [
            sys.executable, "-m", "attnviz.cli", "atlas", str(folder), "--corpus", str(corpus),
            "--out", str(outs[name]), "--top-k", "3", "--max-tokens", str(MAX_TOKENS), *extra,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
    one = json.loads((outs["one"] / "atlas.json").read_text())
    on_ray = json.loads((outs["ray"] / "atlas.json").read_text())
    for score in SCORES:
        np.testing.assert_allclose(on_ray["scores"][score], one["scores"][score], rtol=1e-9)
    assert on_ray["examples"] == one["examples"]
    for table in ("scores", "examples"):
        rows = read_csv(outs["ray"] / f"{table}.csv")
        parquet = pq.read_table(outs["ray"] / f"{table}.parquet").to_pylist()
        assert len(parquet) == len(rows) > 0
        for row, stored in zip(rows, parquet, strict=True):
            for column, text in row.items():
                value = stored[column]
                if isinstance(value, float):
                    assert value == pytest.approx(float(text), rel=1e-12), (table, column)
                else:
                    assert ("" if value is None else str(value)) == text, (table, column)


def test_a_corpus_is_read_from_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from attnviz.attention import AttentionInputError
    from attnviz.pretrained.atlas.corpus import read_corpus

    good = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["first", None, "  second "]}), good)
    assert read_corpus(good) == ["first", "  second "]
    (tmp_path / "bad.parquet").write_text("not parquet")
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "nocolumn.parquet")
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "numbers.parquet")
    pq.write_table(pa.table({"text": ["", " "]}), tmp_path / "blank.parquet")
    for name, message in (
        ("bad.parquet", "not a Parquet file"),
        ("nocolumn.parquet", "no 'text' column \\(it has body\\)"),
        ("numbers.parquet", "holds int64, not strings"),
        ("blank.parquet", "no passage"),
    ):
        with pytest.raises(AttentionInputError, match=message) as raised:
            read_corpus(tmp_path / name)
        assert raised.value.field == "corpus"
