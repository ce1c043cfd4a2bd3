"""The atlas in shards (issue 43, step 1): an exact reduction, and the examples behind scores.

Tiny random models with sharp heads (:func:`tests.pretrained.test_heads.save_sharp`): the
plan's passes split into 1, 2 and 3 shards, run apart and merged, give the one-process
atlas of the same passes to 1e-9 relative; each head's kept passages are a brute-force
ranking of every passage scored alone from transformers' eager ``output_attentions``
(value, passage and peak position); a pass run twice is refused; the ``attnviz atlas``
command writes the atlas and its examples.
"""

from __future__ import annotations

import csv
import json
import pickle
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from attnviz.attention import AttentionInputError
from attnviz.pretrained import PretrainedModel
from attnviz.pretrained.atlas import SCORES, HeadScores, head_scores, plan_atlas, repeated_tokens
from attnviz.pretrained.atlas.corpus import read_corpus
from attnviz.pretrained.atlas.on_ray import AtlasWorker
from attnviz.pretrained.atlas.shards import (
    REPEATED_SCORES,
    atlas_of,
    example_rows,
    merged,
    run_shard,
    shards,
)
from attnviz.pretrained.loading import load_model_dir
from attnviz.pretrained.model import LoadedModel

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers
from tests.pretrained.test_heads import attentions, eager_reference, save_sharp

TEXTS = [
    "the cat sat on the mat because it was tired",
    "a dog ran to the park and the bird sang loud today",
    "the bird sang",
    "big small red house tree bird sang loud today the cat sat on the mat and a dog ran",
    "the mat",
    "tired",  # no query: never ranked
    "a red house and a big tree",
]
MAX_TOKENS = 12
REPEAT = 7
SEQUENCES = 10  # two passes: 8 and 2 sequences
TOP = 3
OPTIONS = {
    "repeat_length": REPEAT, "induction_sequences": SEQUENCES, "seed": 1,
    "max_tokens": MAX_TOKENS,
}  # fmt: skip
"""plan_atlas's options of these tests, besides the model and texts."""


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_transformers()
    root = tmp_path_factory.mktemp("tiny-shards")
    return {
        "llama": save_sharp("llama", tiny.DECODER_STYLE, root / "llama"),
        "bert": save_sharp("bert", tiny.BERT_STYLE, root / "bert"),
    }


def plan_of(model: PretrainedModel, texts: list[str] = TEXTS):  # type: ignore[no-untyped-def]
    return plan_atlas(model, texts, **OPTIONS)


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_shards_merge_into_the_one_process_atlas(folders: dict[str, Path], name: str) -> None:
    model = load_model_dir(name, folders[name])
    plan = plan_of(model)
    one = head_scores(plan)
    for count in (1, 2, 3):
        parts = [run_shard(plan, indices, top_k=TOP) for indices in shards(count, len(plan.passes))]
        for order in (parts, parts[::-1]):
            result = atlas_of(plan, merged(order), 0.0)
            for score in SCORES:
                np.testing.assert_allclose(result.scores[score], one.scores[score], rtol=1e-9)
        assert merged(parts).counts == merged(parts[::-1]).counts
    with pytest.raises(ValueError, match="in both shards"):
        _ = parts[0] + run_shard(plan, parts[0].passes[:1], top_k=TOP)
    with pytest.raises(ValueError, match="ran 3 of the plan's"):
        atlas_of(plan, run_shard(plan, [0, 1, 2]), 0.0)


def test_a_ray_worker_loads_and_runs_in_the_thread_that_runs_its_batches(
    folders: dict[str, Path],
) -> None:
    # Ray Data calls an actor's batches in a thread other than the one that built it; a
    # model loaded in the building thread would leave two OpenMP thread teams in the
    # process, and libgomp then stops spin-waiting (measured about 30% slower on 2 cores).
    # Plain threads stand in for Ray here: the worker class is Ray's only by its calls.
    loaded_in: list[int] = []

    def load() -> LoadedModel:
        loaded_in.append(threading.get_ident())
        return load_model_dir("llama", folders["llama"])

    plan = plan_atlas(load(), TEXTS, **OPTIONS)
    loaded_in.clear()
    worker = AtlasWorker(load, TEXTS, OPTIONS, plan.key, TOP, torch.get_num_threads())
    assert loaded_in == []  # the constructor loads nothing
    half = len(plan.passes) // 2
    with ThreadPoolExecutor(max_workers=1) as pool:
        parts = [
            pool.submit(worker, {"index": np.arange(start, stop)}).result()
            for start, stop in ((0, half), (half, len(plan.passes)))
        ]
        batches_in = pool.submit(threading.get_ident).result()
    assert loaded_in == [batches_in]  # once, in the batches' thread
    shard = merged([pickle.loads(part["shard"][0]) for part in parts])
    one = head_scores(plan, top_k=TOP)
    result = atlas_of(plan, shard, 0.0)
    for score in SCORES:
        np.testing.assert_allclose(result.scores[score], one.scores[score], rtol=1e-9)
    assert result.examples == one.examples
    stranger = AtlasWorker(load, TEXTS[:-1], OPTIONS, plan.key, TOP, torch.get_num_threads())
    with pytest.raises(RuntimeError, match="is not the driver's"):
        stranger({"index": np.arange(1)})


def brute_passages(reference, model: PretrainedModel, plan) -> dict[str, list]:  # type: ignore[no-untyped-def]
    """Per score, per passage: (value (N, H), peak position (N, H)) or None, query by query."""
    special = set(model.tokenizer.all_special_ids)
    found: dict[str, list] = {name: [] for name in SCORES}
    for p in range(plan.info.sequences):
        ids = plan.passes[p].ids  # (1, L): the plan's own tokens of passage p
        weights = attentions(reference, ids)[:, 0]  # (N, H, L, L) float64
        terms: dict[str, list[torch.Tensor]] = {}
        queries = [i for i in range(1, ids.shape[1]) if int(ids[0, i]) not in special]
        for i in queries:
            row = weights[:, :, i]
            logs = torch.where(row > 0, row.clamp_min(1e-300).log(), torch.zeros_like(row))
            for score, term in (
                ("previous_token", row[..., i - 1]),
                ("first_token", row[..., 0]),
                ("self", row[..., i]),
                ("entropy", -(row * logs).sum(-1)),
            ):
                terms.setdefault(score, []).append(term)
        for score in ("previous_token", "first_token", "self", "entropy"):
            if not queries:
                found[score].append(None)
                continue
            stacked = torch.stack(terms[score])  # (Q, N, H)
            peak = torch.tensor(queries)[stacked.argmax(0)]
            found[score].append((stacked.mean(0).numpy(), peak.numpy()))
    ids, prefix = repeated_tokens(model, SEQUENCES, REPEAT, 1)
    weights = attentions(reference, ids)  # (N, B, H, L, L)
    for b in range(ids.shape[0]):
        queries = list(range(prefix + REPEAT, prefix + 2 * REPEAT))
        for score, back in (("induction", REPEAT - 1), ("duplicate_token", REPEAT)):
            stacked = torch.stack([weights[:, b, :, i, i - back] for i in queries])
            peak = torch.tensor(queries)[stacked.argmax(0)]
            found[score].append((stacked.mean(0).numpy(), peak.numpy()))
    return found


def test_each_heads_examples_are_a_brute_force_ranking(folders: dict[str, Path]) -> None:
    model = load_model_dir("llama", folders["llama"])
    plan = plan_of(model)
    shard = merged([run_shard(plan, s, top_k=TOP) for s in shards(2, len(plan.passes))])
    found = brute_passages(eager_reference(folders["llama"], model.family), model, plan)
    layers, heads = model.num_layers, model.num_heads
    for score in SCORES:
        kept = shard.examples[score]
        assert kept.values.shape == (layers, heads, TOP)
        for layer in range(layers):
            for head in range(heads):
                ranked = sorted(
                    (-float(v[0][layer, head]), p, int(v[1][layer, head]))
                    for p, v in enumerate(found[score])
                    if v is not None
                )[:TOP]
                where = (score, layer, head)
                assert list(kept.passages[layer, head]) == [p for _, p, _ in ranked], where
                values = [-v for v, _, _ in ranked]
                np.testing.assert_allclose(kept.values[layer, head], values, atol=1e-5)
                assert list(kept.positions[layer, head]) == [q for _, _, q in ranked], where
    assert 5 not in shard.examples["previous_token"].passages  # "tired": no query
    rows = example_rows(plan, shard)
    assert len(rows) == sum(int((shard.examples[s].passages >= 0).sum()) for s in SCORES)
    first = next(r for r in rows if r["score"] == "self" and r["rank"] == 0)
    assert first["kind"] == "corpus" and first["text"] == TEXTS[first["passage"]]
    tokens = model.token_strings(plan.passes[first["passage"]].ids[0].tolist())
    assert first["token"] == tokens[first["position"]]
    random = [r for r in rows if r["score"] in REPEATED_SCORES]
    assert random and all(r["kind"] == "random tokens" and r["text"] is None for r in random)


def test_a_corpus_is_read_from_txt_and_jsonl(tmp_path: Path) -> None:
    txt = tmp_path / "corpus.txt"
    txt.write_text("one passage\n\n  \nanother one\n")
    assert read_corpus(txt) == ["one passage", "another one"]
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text('{"text": "first"}\n\n{"text": "second", "id": 2}\n')
    assert read_corpus(jsonl) == ["first", "second"]
    for name, content, message in (
        ("bad.jsonl", '{"text": 3}\n', "bad.jsonl:1: no string 'text'"),
        ("bad2.jsonl", "not json\n", "bad2.jsonl:1:"),
        ("empty.txt", "\n\n", "no passage"),
        ("corpus.csv", "text\n", "a .txt"),
    ):
        (tmp_path / name).write_text(content)
        with pytest.raises(AttentionInputError, match=message) as raised:
            read_corpus(tmp_path / name)
        assert raised.value.field == "corpus"
    with pytest.raises(AttentionInputError, match="no such file"):
        read_corpus(tmp_path / "missing.txt")


def test_the_atlas_command_writes_the_atlas_and_its_examples(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "attnviz.cli", "atlas", str(folders["bert"]), "--corpus", str(corpus),
        "--out", str(out), "--shards", "2", "--top-k", "2", "--max-tokens", str(MAX_TOKENS),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    data = json.loads((out / "atlas.json").read_text())
    written = HeadScores.from_dict(data)
    model = load_model_dir("bert", folders["bert"])
    expected = head_scores(model, TEXTS, repeat_length=None, max_tokens=MAX_TOKENS)
    for score in SCORES:
        np.testing.assert_allclose(written.scores[score], expected.scores[score], rtol=1e-9)
    assert written.corpus == expected.corpus
    assert data["top_k"] == 2 and data["passages"]
    with (out / "examples.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == len(data["examples"]) and {r["score"] for r in rows} == set(SCORES)
    with (out / "scores.csv").open() as file:
        table = list(csv.DictReader(file))
    assert len(table) == model.num_layers * model.num_heads
    for row in table:
        layer, head = int(row["layer"]), int(row["head"])
        for score in SCORES:
            assert float(row[score]) == pytest.approx(expected.scores[score][layer, head], rel=1e-9)
    bad = subprocess.run(
        [*command[:5], "--corpus", str(tmp_path / "missing.txt"), "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert bad.returncode != 0 and "corpus" in bad.stderr and "no such file" in bad.stderr


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_atlas_and_its_examples_on_the_gpu_are_the_cpus(folders: dict[str, Path]) -> None:
    # The observer keeps each input's sums and peaks on the layer's device: on CUDA the
    # reduction and the kept passages are those of the CPU (float32 arithmetic apart).
    from attnviz.pretrained.placement import Placement

    atlases = {}
    for device in ("cpu", "cuda"):
        placement = Placement(dtype="float32", device_map=device)
        model = load_model_dir("llama", folders["llama"], placement=placement)
        assert model.home.type == device
        plan = plan_of(model)
        atlases[device] = merged(
            [run_shard(plan, s, top_k=TOP) for s in shards(2, len(plan.passes))]
        )
    cpu, gpu = atlases["cpu"], atlases["cuda"]
    assert cpu.counts == gpu.counts
    for score in SCORES:
        np.testing.assert_allclose(gpu.sums[score], cpu.sums[score], rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(gpu.examples[score].passages, cpu.examples[score].passages)
        # A query's peak can flip between two terms equal to float32 rounding (saturated heads).
        same = gpu.examples[score].positions == cpu.examples[score].positions
        assert same.mean() >= 0.95, (score, same.mean())


def test_a_bad_out_folder_is_a_usage_error_before_any_pass(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    """--out is checked before the corpus is read or the model loaded (issue 53): a file,
    a path under a file and a folder that cannot be made are each a one-line usage error
    (exit 2) naming --out, with no pass run and no traceback; a folder the run made is
    removed when the run then fails (a missing corpus)."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    a_file = tmp_path / "atlas.json"
    a_file.write_text("{}")
    for out in (a_file, a_file / "under", Path("/proc/attnviz-atlas")):
        command = [
            sys.executable, "-m", "attnviz.cli", "atlas", str(folders["bert"]),
            "--corpus", str(corpus), "--out", str(out),
        ]  # fmt: skip
        run = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 2, (out, run.stderr)
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("attnviz: --out:"), run.stderr
        assert str(out) in lines[0]
    made = tmp_path / "new" / "out"
    missing = [
        sys.executable, "-m", "attnviz.cli", "atlas", str(folders["bert"]),
        "--corpus", str(tmp_path / "missing.jsonl"), "--out", str(made),
    ]  # fmt: skip
    run = subprocess.run(missing, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode != 0 and "no such file" in run.stderr
    assert not made.exists()
