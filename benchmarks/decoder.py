"""Decoder benchmark: SmolLM2-135M-Instruct (30 layers x 9 heads) at 256, 1024 and 4096 tokens.

Usage (from the repository root):  make bench-models
                              or   .venv/bin/python -m benchmarks.decoder [--lengths 256 1024]

Side by side in one run, medians in milliseconds (ms), for each length L:

* forward: the model's own forward pass in this process, transformers' ``model(input_ids)``
  with its default attention (SDPA) and the logits of every position: the baseline of the
  ratios;
* recorded: AttnViz's recorded pass (:meth:`attnviz.pretrained.PretrainedModel.run`: the
  backbone with every attention call recorded; the output head runs only when a view asks
  for next tokens);
* reference: transformers' own forward with ``output_attentions=True`` (eager), time and
  the memory its attentions take (N x H x L^2 float32), where that fits (not at 4096:
  30 x 9 x 4096^2 x 4 bytes is 18.1 GB);
* API, against a real server (``python -m attnviz`` on loopback, started fresh for each
  length so that its peak memory is that length's): POST /api/v1/models/attention/layers
  with display_size 64, base64 float32, as the page asks: request to the first layer's
  line (the first row of thumbnails can be drawn), and to the end (the whole 270-map
  grid); then one head at full resolution (layer_index + head_index, the click on a
  thumbnail, reusing the kept forward pass); the server's peak resident memory
  (VmHWM of /proc/PID/status), model weights included;
* page (when Chromium is installed): in headless Chromium against the same server, /models
  with SmolLM2 chosen, the chat template off (the prompt is exactly the text) and 0 new
  tokens: the Compute click to the first row of thumbnails drawn and to the whole grid
  drawn (``window.attnvizModels.timings``: the page streams the grid as the API timing
  does).

Targets (issue 30): at about 4,000 tokens the whole grid within 1.5x the forward pass and
its first layer on the wire within 0.15x, the server's resident memory growing at most 1 GiB
during the requests (VmHWM reset once the model is loaded: "growth"); at 8,192 tokens the
grid completes, growing it at most 2 GiB; at 1,024 tokens the grid is faster than
transformers' ``output_attentions`` forward. The page is timed up to 4,096 tokens. Machines are
shared and noisy: each repetition runs the forward pass, the API and the page one after
the other (after one warm-up repetition), and each ratio is the median of the
repetitions' own ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import httpx2 as httpx
import torch
from attnviz.devtools import CHROMIUM_ARGS, chromium_path, live_process
from attnviz.pretrained import ModelRegistry, PretrainedModel

from benchmarks.run import median_ms

NAME = "SmolLM2-135M-Instruct"
PASSAGE = (
    "Attention lets every token of a sentence look back at the tokens before it. "
    "A decoder language model reads a prompt one position at a time, and each of its "
    "heads decides how much of every earlier word to carry forward into the next one. "
)
GiB = 2**30
ENDINGS = (  # each one token after a space, for SmolLM2's tokenizer
    *("cat", "dog", "sun", "tree", "car", "box", "red", "blue", "green", "house", "water"),
    *("fire", "stone", "bird", "fish", "book", "door", "road", "hill", "lake", "moon"),
    *("star", "rain", "snow", "wind"),
)


def prompt_of(model: PretrainedModel, length: int) -> str:
    """A text of exactly ``length`` tokens (the passage repeated, cut at a token)."""
    ids = model.tokenizer(PASSAGE * (length // 40 + 2))["input_ids"][:length]
    text = model.tokenizer.decode(ids)
    assert model.tokenize([text]).input_ids.shape[1] == length, "not a token boundary"
    return str(text)


def peak_rss_bytes(pid: int, field: str = "VmHWM") -> int:
    """The peak resident memory of a process so far (VmHWM), or another field (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field}")


def reset_peak(pid: int) -> int:
    """Reset the process's VmHWM to its current resident memory (Linux clear_refs 5);
    return that resident memory, the base of the growth measured after."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return peak_rss_bytes(pid, "VmRSS")


@contextmanager
def decoder_server() -> Iterator[tuple[str, Any]]:
    """A fresh ``python -m attnviz`` serving SmolLM2 only, once it has loaded it."""
    env = {
        "ATTNVIZ_PACKAGED_MODELS": json.dumps([NAME]),
        "ATTNVIZ_COMPUTE_TIMEOUT_S": "900",
        "ATTNVIZ_MAX_SEQ_LEN": "8192",
    }
    with live_process(env=env, timeout_s=120) as (url, process):
        with httpx.Client(base_url=url, timeout=60) as client:
            while client.get("/api/v1/models").json()["loading"]:
                time.sleep(0.5)
        yield url, process


def stream_once(
    client: httpx.Client, text: str, pid: int, length: int
) -> tuple[float, float, float, int, int]:
    """One streamed grid (ms to its first layer line and to its end), then one head (ms);
    the server's resident memory growth (bytes) during each (VmHWM reset before each)."""
    body: dict[str, Any] = {
        "model": NAME,
        "texts": [text],
        "sequence_index": 0,
        "display_size": 64,
        "encoding": "base64_float32",
    }
    base = reset_peak(pid)
    started = time.perf_counter()
    layers, first = 0, 0.0
    with client.stream("POST", "/api/v1/models/attention/layers", json=body) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            kind = json.loads(line)["type"]
            assert kind != "error", line
            if kind == "layer":
                layers += 1
                if layers == 1:
                    first = (time.perf_counter() - started) * 1000
    whole = (time.perf_counter() - started) * 1000
    grid_growth = peak_rss_bytes(pid) - base
    assert layers == 30, layers
    # One head at full size is L^2 numbers: beyond ATTNVIZ_MAX_WEIGHT_CELLS' 2^25 (about
    # 5,800 tokens) the click asks for it pooled to 1,024 per side.
    head = {**body, "layer_index": 15, "head_index": 4, "display_size": None}
    if length > 5792:
        head["display_size"] = 1024  # the request schema's largest
    base = reset_peak(pid)
    started = time.perf_counter()
    answer = client.post("/api/v1/models/attention", json=head)
    assert answer.status_code == 200, answer.text
    click = (time.perf_counter() - started) * 1000
    return first, whole, click, grid_growth, peak_rss_bytes(pid) - base


DRAWN = "document.getElementById('view-model').dataset.drawn === 'true'"


@contextmanager
def models_page(url: str) -> Iterator[Any]:
    """/models in headless Chromium, SmolLM2 chosen, chat template off, 0 new tokens.

    Yields a function text -> (ms from the Compute click to the grid's first row drawn,
    ms to the whole grid drawn), from ``window.attnvizModels.timings``; None when Chromium
    is not installed.
    """
    executable = chromium_path()
    if executable is None:
        yield None
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            # bypass_csp: wait_for_function evaluates strings, which the page's CSP forbids.
            page = browser.new_page(viewport={"width": 1400, "height": 950}, bypass_csp=True)
            page.goto(url + "/models")
            page.wait_for_function(DRAWN, timeout=300_000)  # the page's own first view
            page.select_option("#model", NAME)
            page.uncheck("#chat")
            page.fill("#max-new-tokens", "0")

            def compute(text: str) -> tuple[float, float]:
                page.fill("#texts", text)
                page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
                page.click("#compute")
                page.wait_for_function(DRAWN, timeout=600_000)
                timings = page.evaluate("() => window.attnvizModels.timings")
                shape = page.evaluate("() => window.attnvizModels.lastResponse.shape")
                assert shape[:3] == [30, 1, 9], shape
                tiles = page.evaluate(
                    "() => { const t = document.getElementById('model-grid').tiles;"
                    " return [t.rows, t.cols]; }"
                )
                assert tiles == [30, 9], tiles
                return timings["firstLayerMs"], timings["wholeGridMs"]

            yield compute
        finally:
            browser.close()


@contextmanager
def attention_implementation(transformers_model: Any, name: str) -> Iterator[None]:
    """transformers' own ``name`` attention ("sdpa", "eager") in the block, the recorder after."""
    from attnviz.pretrained.recorder import use_recorder

    transformers_model.set_attn_implementation(name)
    try:
        yield
    finally:
        use_recorder(transformers_model)


def measure(model: PretrainedModel, length: int, reps: int) -> dict[str, Any]:
    """Every figure of one length; forward, API and page interleaved, rep by rep, medians.

    Every request ends in another word (the prompt stays ``length`` tokens), so each runs
    the model again (no kept forward pass); a repetition runs the three side by side: on
    a shared machine a slow spell then slows all three, not one.
    """
    text = prompt_of(model, length - 1)
    # One word more per request, a different one each time, so that every request runs
    # the model again (nothing kept) on exactly ``length`` tokens.
    endings = iter(ENDINGS)

    def prompt() -> str:
        ending = f"{text} {next(endings)}"
        assert model.tokenize([ending]).input_ids.shape[1] == length, ending[-40:]
        return ending

    transformers_model = model.model

    def run_forward(b: Any) -> object:
        with torch.inference_mode():
            return transformers_model(b.input_ids).logits

    growths: list[tuple[int, int]] = []
    figures: dict[str, list[float]] = {
        k: [] for k in ("forward", "recorded", "first", "whole", "head", "page_first", "page_whole")
    }
    with decoder_server() as (url, process), httpx.Client(base_url=url, timeout=900) as client:
        idle = reset_peak(process.pid)  # the loaded server, before any request
        with models_page(url) if length <= 4096 else nullcontext() as page:
            for rep in range(reps + 1):  # the first is a warm-up, not counted
                batch = model.tokenize([prompt()])
                with attention_implementation(transformers_model, "sdpa"):
                    forward = median_ms(lambda b=batch: run_forward(b), 1)
                recorded = median_ms(lambda b=batch: model.run(b, device="cpu"), 1)
                first, whole, head, grid_growth, click_growth = stream_once(
                    client, prompt(), process.pid, length
                )
                growths.append((grid_growth, click_growth))
                print(
                    f"  L={length} rep {rep}: forward {forward:.0f} ms, grid: first layer "
                    f"{first:.0f} ms, whole {whole:.0f} ms, growth {grid_growth / GiB:.2f} GiB; "
                    f"click {head:.0f} ms, growth {click_growth / GiB:.2f} GiB",
                    flush=True,
                )
                shown = None if page is None else page(prompt())
                if rep == 0:
                    continue
                for key, value in zip(
                    ("forward", "recorded", "first", "whole", "head"),
                    (forward, recorded, first, whole, head),
                    strict=True,
                ):
                    figures[key].append(value)
                if shown is not None:
                    figures["page_first"].append(shown[0])
                    figures["page_whole"].append(shown[1])
    result: dict[str, Any] = {k: statistics.median(v) if v else None for k, v in figures.items()}
    result["grid_growth"] = max(g for g, _ in growths)
    result["click_growth"] = max(c for _, c in growths)
    result["growth"] = max(result["grid_growth"], result["click_growth"])
    result["peak"] = idle + result["growth"]
    result["first_x"] = statistics.median(
        a / f for a, f in zip(figures["first"], figures["forward"], strict=True)
    )
    # The ratios rep by rep (each against the forward pass of its own repetition).
    result["whole_x"] = statistics.median(
        w / f for w, f in zip(figures["whole"], figures["forward"], strict=True)
    )
    result["page_x"] = (
        statistics.median(
            w / f for w, f in zip(figures["page_whole"], figures["forward"], strict=True)
        )
        if figures["page_whole"]
        else None
    )
    reference_ms = reference_gib = None
    cells = 30 * 9 * length**2
    if cells * 4 < 4 * GiB:
        batch = model.tokenize([text])

        def run_reference(b: Any = batch) -> object:
            with torch.inference_mode():
                return transformers_model(b.input_ids, output_attentions=True)

        with attention_implementation(transformers_model, "eager"):
            reference_ms = median_ms(run_reference, max(1, reps))
        reference_gib = cells * 4 / GiB
    result["reference_ms"], result["reference_gib"] = reference_ms, reference_gib
    return result


def device_timings(model: PretrainedModel, length: int, device: str, reps: int) -> dict[str, float]:
    """In this process on ``device``: medians in ms of transformers' forward pass, the recorded
    pass, the whole grid's walk (every layer and head pooled to 64, the averages) and one
    head at full resolution from the kept pass (the click). Run for "cuda" when torch sees a
    GPU (the server's timings above are the CPU's)."""
    from attnviz.pretrained.display import LayerWalk

    batch = model.tokenize([prompt_of(model, length)])
    on = model.on(torch.device(device))

    def synchronized() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def forward() -> None:
        with torch.inference_mode():
            on(batch.input_ids.to(device))
        synchronized()

    result = model.run(batch, device=device)

    def grid() -> None:
        result.memo.averages.clear()  # every layer again, as a new input's grid
        walk = LayerWalk(result, display_size=64)
        for _ in walk.layers():
            pass
        walk.view()

    with attention_implementation(on, "sdpa"):
        forward_ms = median_ms(forward, reps)
    figures = {
        "forward": forward_ms,
        "recorded": median_ms(lambda: model.run(batch, device=device), reps),
        "grid": median_ms(grid, reps),
    }
    figures["head"] = median_ms(
        lambda: LayerWalk(result, layer_index=15, head_index=4).view(), reps
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096, 8192])
    parser.add_argument("--reps", type=int, default=None, help="repetitions per length")
    args = parser.parse_args()
    registry = ModelRegistry()
    registry.configure([], packaged=[NAME])
    registry.load()
    model = registry.get(NAME)
    print(f"{NAME}: 30 layers x 9 heads (3 key/value heads), d_model 576")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU\n")
    os.environ["HF_HUB_OFFLINE"] = "1"
    rows = []
    for length in args.lengths:
        reps = args.reps or (5 if length <= 1024 else 1)
        m = measure(model, length, reps)
        rows.append((length, m))
        page = (
            f"page: first layer {m['page_first']:.0f} ms, whole grid {m['page_whole']:.0f} ms "
            f"({m['page_x']:.2f}x forward); "
            if m["page_x"] is not None
            else ""
        )
        reference = (
            f"output_attentions {m['reference_ms']:.0f} ms, its maps {m['reference_gib']:.2f} GiB"
            if m["reference_ms"] is not None
            else "output_attentions not run (its maps alone: "
            f"{30 * 9 * length**2 * 4 / 1e9:.1f} GB)"
        )
        print(
            f"L={length} ({reps} reps): forward {m['forward']:.0f} ms, recorded "
            f"{m['recorded']:.0f} ms; first layer {m['first']:.0f} ms "
            f"({m['first_x']:.2f}x forward), whole grid {m['whole']:.0f} ms "
            f"({m['whole_x']:.2f}x forward); one head {m['head']:.0f} ms; "
            f"server peak {m['peak'] / GiB:.2f} GiB, growth {m['growth'] / GiB:.2f} GiB "
            f"(grid {m['grid_growth'] / GiB:.2f} GiB, click {m['click_growth'] / GiB:.2f} GiB); "
            f"{page}{reference}",
            flush=True,
        )
    print()
    print(
        "| L | forward | recorded | first layer (x forward) | whole grid (x forward) | one head "
        "| server peak (growth) | page: first layer | page: whole grid (x forward) "
        "| output_attentions (its maps) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for length, m in rows:
        reference = (
            f"{m['reference_ms']:.0f} ms ({m['reference_gib']:.2f} GiB)"
            if m["reference_ms"] is not None
            else f"not run ({30 * 9 * length**2 * 4 / 1e9:.1f} GB)"
        )
        shown = (
            f"{m['page_first']:.0f} ms | {m['page_whole']:.0f} ms ({m['page_x']:.2f}x)"
            if m["page_x"] is not None
            else "not measured | not measured"
        )
        print(
            f"| {length} | {m['forward']:.0f} ms | {m['recorded']:.0f} ms | {m['first']:.0f} ms "
            f"({m['first_x']:.2f}x) | {m['whole']:.0f} ms ({m['whole_x']:.2f}x) | "
            f"{m['head']:.0f} ms | {m['peak'] / GiB:.2f} GiB ({m['growth'] / GiB:.2f} GiB) | "
            f"{shown} | {reference} |"
        )
    if any(m["page_x"] is None for _, m in rows):
        print("\npage: chromium is not installed (make browser), not measured")
    if torch.cuda.is_available():
        print(f"\nCUDA ({torch.cuda.get_device_name()}), in process, medians of 5:")
        print("| L | forward | recorded | grid: recorded + walk (x forward) | one head |")
        print("|---|---|---|---|---|")
        for length in args.lengths:
            d = device_timings(model, length, "cuda", 5)
            whole = d["recorded"] + d["grid"]
            print(
                f"| {length} | {d['forward']:.0f} ms | {d['recorded']:.0f} ms | {whole:.0f} ms "
                f"({whole / d['forward']:.2f}x) | {d['head']:.0f} ms |",
                flush=True,
            )
    else:
        print("\nCUDA: torch sees no GPU here, not measured")


if __name__ == "__main__":
    main()
