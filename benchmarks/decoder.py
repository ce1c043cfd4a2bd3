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

Targets (issue 14): at 1024 tokens the whole grid within 2x the forward pass, one head
under 1 s, server memory under 2 GiB; at 4096 it completes under 4 GiB. Machines are
shared and noisy: read the medians and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


def prompt_of(model: PretrainedModel, length: int) -> str:
    """A text of exactly ``length`` tokens (the passage repeated, cut at a token)."""
    ids = model.tokenize([PASSAGE * (length // 40 + 2)]).input_ids[0, :length]
    text = model.tokenizer.decode(ids.tolist())
    assert model.tokenize([text]).input_ids.shape[1] == length, "not a token boundary"
    return str(text)


def peak_rss_bytes(pid: int) -> int:
    """The peak resident memory of a process so far (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


@contextmanager
def decoder_server() -> Iterator[tuple[str, Any]]:
    """A fresh ``python -m attnviz`` serving SmolLM2 only, once it has loaded it."""
    env = {"ATTNVIZ_PACKAGED_MODELS": json.dumps([NAME]), "ATTNVIZ_COMPUTE_TIMEOUT_S": "600"}
    with live_process(env=env, timeout_s=120) as (url, process):
        with httpx.Client(base_url=url, timeout=60) as client:
            while client.get("/api/v1/models").json()["loading"]:
                time.sleep(0.5)
        yield url, process


def api_timings(url: str, process: Any, text: str, reps: int) -> dict[str, float]:
    """Stream to first layer and to end, one head, and the server's peak memory so far."""
    body: dict[str, Any] = {
        "model": NAME,
        "texts": [text],
        "sequence_index": 0,
        "display_size": 64,
        "encoding": "base64_float32",
    }
    first, whole, heads = [], [], []
    with httpx.Client(base_url=url, timeout=600) as client:
        for rep in range(reps):
            # A new prompt each time (a trailing word), so the forward pass runs again.
            timed = {**body, "texts": [text if rep == 0 else f"{text}{' x' * rep}"]}
            started = time.perf_counter()
            layers = 0
            with client.stream("POST", "/api/v1/models/attention/layers", json=timed) as r:
                assert r.status_code == 200, r.read()
                for line in r.iter_lines():
                    kind = json.loads(line)["type"]
                    if kind == "layer":
                        layers += 1
                        if layers == 1:
                            first.append((time.perf_counter() - started) * 1000)
                whole.append((time.perf_counter() - started) * 1000)
            assert layers == 30, layers
            head = {**timed, "layer_index": 15, "head_index": 4}
            del head["display_size"]
            started = time.perf_counter()
            answer = client.post("/api/v1/models/attention", json=head)
            assert answer.status_code == 200, answer.text
            heads.append((time.perf_counter() - started) * 1000)
    peak = peak_rss_bytes(process.pid)
    return {
        "first": statistics.median(first),
        "whole": statistics.median(whole),
        "head": statistics.median(heads),
        "peak": peak,
    }


DRAWN = "document.getElementById('view-model').dataset.drawn === 'true'"


def page_timings(url: str, text: str, reps: int) -> dict[str, float] | None:
    """Median ms from the Compute click to the grid's first row and to the whole grid drawn.

    In headless Chromium (None when it is not installed): /models with SmolLM2 chosen, its
    chat template unticked (the prompt is exactly ``text``), 0 new tokens; each repetition
    adds a trailing word (a new forward pass, not the server's kept one).
    """
    executable = chromium_path()
    if executable is None:
        return None
    from playwright.sync_api import sync_playwright

    first, whole = [], []
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
            for rep in range(reps):
                page.fill("#texts", f"{text}{' y' * (rep + 1)}")
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
                first.append(timings["firstLayerMs"])
                whole.append(timings["wholeGridMs"])
        finally:
            browser.close()
    return {"first": statistics.median(first), "whole": statistics.median(whole)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096])
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
        reps = 5 if length <= 256 else 3 if length <= 1024 else 1
        text = prompt_of(model, length)
        batch = model.tokenize([text])
        recorded = median_ms(lambda b=batch: model.run(b, device="cpu"), reps)
        reference_ms = reference_gib = None
        cells = 30 * 9 * length**2
        transformers_model = model.model
        from attnviz.pretrained.recorder import use_recorder

        transformers_model.set_attn_implementation("sdpa")
        try:

            def run_forward(b: Any = batch, m: Any = transformers_model) -> object:
                with torch.inference_mode():
                    return m(b.input_ids).logits

            forward = median_ms(run_forward, reps)
        finally:
            use_recorder(transformers_model)
        if cells * 4 < 4 * GiB:
            transformers_model.set_attn_implementation("eager")
            try:

                def run_reference(b: Any = batch, m: Any = transformers_model) -> object:
                    with torch.inference_mode():
                        return m(b.input_ids, output_attentions=True)

                reference_ms = median_ms(run_reference, reps)
            finally:
                use_recorder(transformers_model)
            reference_gib = cells * 4 / GiB
        with decoder_server() as (url, process):
            api = api_timings(url, process, text, reps)
            page = page_timings(url, text, reps)
        rows.append((length, forward, recorded, reference_ms, reference_gib, api, page))
        print(
            f"L={length}: forward {forward:.0f} ms, recorded {recorded:.0f} ms; "
            f"first layer {api['first']:.0f} ms, whole "
            f"grid {api['whole']:.0f} ms ({api['whole'] / forward:.2f}x forward); one head "
            f"{api['head']:.0f} ms; server peak {api['peak'] / GiB:.2f} GiB; "
            + (
                f"page: first layer {page['first']:.0f} ms, whole grid {page['whole']:.0f} ms "
                f"({page['whole'] / forward:.2f}x forward); "
                if page is not None
                else ""
            )
            + (
                f"output_attentions {reference_ms:.0f} ms, its maps {reference_gib:.2f} GiB"
                if reference_ms is not None
                else f"output_attentions not run (its maps alone: {cells * 4 / 1e9:.1f} GB)"
            ),
            flush=True,
        )
    print()
    print(
        "| L | forward | recorded | first layer | whole grid (x forward) | one head | server peak "
        "| page: first layer | page: whole grid (x forward) | output_attentions (its maps) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for length, forward, recorded, reference_ms, reference_gib, api, page in rows:
        reference = (
            f"{reference_ms:.0f} ms ({reference_gib:.2f} GiB)"
            if reference_ms is not None
            else f"not run ({30 * 9 * length**2 * 4 / 1e9:.1f} GB)"
        )
        shown = (
            f"{page['first']:.0f} ms | {page['whole']:.0f} ms ({page['whole'] / forward:.2f}x)"
            if page is not None
            else "not measured | not measured"
        )
        print(
            f"| {length} | {forward:.0f} ms | {recorded:.0f} ms | {api['first']:.0f} ms | "
            f"{api['whole']:.0f} ms "
            f"({api['whole'] / forward:.2f}x) | {api['head']:.0f} ms | "
            f"{api['peak'] / GiB:.2f} GiB | {shown} | {reference} |"
        )
    if any(page is None for *_, page in rows):
        print("\npage: chromium is not installed (make browser), not measured")


if __name__ == "__main__":
    main()
