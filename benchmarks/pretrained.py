"""Pretrained-model benchmark: one 32-token sentence through all 6 layers of all-MiniLM-L6-v2.

Usage (from the repository root):  make bench-models
                              or   .venv/bin/python -m benchmarks.pretrained [--reps N]

Side by side in one run, medians in milliseconds (ms):

* engine: AttnViz's runtime (tokenise, the recorded forward pass through transformers,
  every head's weights by the model's eager attention, head and layer means, rollout)
  in this process;
* reference: transformers' BertModel (eager attention, output_attentions=True) on
  the same ids, forward pass only;
* API: POST /api/v1/models/attention to a real server (python -m attnviz on loopback,
  nothing kept between requests: each runs the model), base64 float32 as the page asks,
  request to parsed response;
* page: in headless Chromium, the Compute click to the drawn 6 x 12 grid (request +
  response + decode + Plotly), split into response and draw.

Machines are shared and noisy: read the medians and the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import httpx2 as httpx
import torch
from attnviz.devtools import CHROMIUM_ARGS, chromium_path, live_process
from attnviz.pretrained import ModelRegistry
from attnviz.pretrained.maps import batch_maps

from benchmarks.run import median_ms

SENTENCE = (
    "When the teacher typed a sentence, every layer and head of the small BERT model lit "
    "up, showing which earlier words each token looked at the most."
)
TOKENS = 32


def page_timings(url: str, reps: int) -> tuple[float, float, float] | None:
    """Median (total, response, draw) ms from Compute to the drawn grid, or None."""
    executable = chromium_path()
    if executable is None:
        return None
    from playwright.sync_api import sync_playwright

    totals, responses, draws = [], [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 950}, bypass_csp=True)
        page.goto(url + "/models")
        page.wait_for_function("document.getElementById('view-model').dataset.drawn === 'true'")
        page.fill("#texts", SENTENCE)
        for i in range(reps + 1):
            page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
            page.click("#compute")
            page.wait_for_function(
                "document.getElementById('view-model').dataset.drawn === 'true'", timeout=30_000
            )
            timings = page.evaluate("() => window.attnvizModels.timings")
            shape = page.evaluate("() => window.attnvizModels.lastResponse.shape")
            assert shape == [6, 1, 12, TOKENS, TOKENS], shape
            tiles = page.evaluate(
                "() => { const t = document.getElementById('model-grid').tiles;"
                " return [t.rows, t.cols]; }"
            )
            assert tiles == [6, 12], tiles
            if i == 0:
                continue  # warm-up
            responses.append(timings["responseMs"])
            draws.append(timings["drawMs"])
            totals.append(timings["responseMs"] + timings["drawMs"])
        browser.close()
    return statistics.median(totals), statistics.median(responses), statistics.median(draws)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15, help="timed repetitions of each figure")
    args = parser.parse_args()

    registry = ModelRegistry()
    registry.configure([], packaged=["all-MiniLM-L6-v2"])
    registry.load()
    model = registry.get(None)
    batch = model.tokenize([SENTENCE])
    assert batch.input_ids.shape[1] == TOKENS, batch.tokens
    print(f"{model.name}: 6 layers x 12 heads, one sentence of {TOKENS} tokens")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, reps {args.reps}\n")

    engine = median_ms(lambda: batch_maps(model.attention([SENTENCE], device="cpu")), args.reps)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import BertModel

    reference = BertModel.from_pretrained(
        str(model.path), attn_implementation="eager", local_files_only=True
    ).eval()

    def run_reference() -> object:
        with torch.inference_mode():
            return reference(
                input_ids=batch.input_ids,
                token_type_ids=batch.token_type_ids,
                attention_mask=batch.attention_mask.long(),
                output_attentions=True,
            )

    ref = median_ms(run_reference, args.reps)
    # Nothing kept: each request runs the model again (a click on the page reuses the kept
    # pass, which would time a lookup here).
    env = {
        "ATTNVIZ_PACKAGED_MODELS": '["all-MiniLM-L6-v2"]',
        "ATTNVIZ_RECORDING_CACHE_BYTES": "0",
        "ATTNVIZ_RESPONSE_CACHE_BYTES": "0",
    }
    with live_process(env=env) as (url, _):
        while httpx.get(url + "/api/v1/models").json()["loading"]:
            time.sleep(0.2)
        body = {"texts": [SENTENCE], "encoding": "base64_float32"}
        with httpx.Client(base_url=url, timeout=60) as client:
            api = median_ms(
                lambda: client.post("/api/v1/models/attention", json=body).json(), args.reps
            )
        page = page_timings(url, args.reps)

    rows = [
        ("engine (tokenise, 6 layers, means, rollout)", engine),
        ("reference: transformers BertModel forward", ref),
        ("API request, base64 float32", api),
    ]
    if page is not None:
        rows += [
            ("page: Compute click to drawn 6 x 12 grid", page[0]),
            ("  of which request and response", page[1]),
            ("  of which decode and draw", page[2]),
        ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:8.1f} ms")
    print()
    print(f"engine / transformers forward: {engine / ref:.2f}x")
    print(f"API / engine:                  {api / engine:.2f}x")
    if page is None:
        print("page: chromium is not installed (make browser), not measured")


if __name__ == "__main__":
    main()
