"""The methods beyond raw weights, timed side by side: MiniLM and SmolLM2 at 24, 128, 512 tokens.

Usage (from the repository root):  make bench-models
                              or   .venv/bin/python -m benchmarks.methods [--reps N]

Each figure is the median wall time in milliseconds (ms) of one in-process request to
POST /api/v1/models/attention for one input (``sequence_index``, ``display_size`` 64 as
the page asks, base64 float32): the forward pass, every layer's maps, the averages and the
method's own work. The recorded pass is kept between requests as on a real server (the
page asks several views of one input), so each request after the first pays for its
method and its maps, not the forward pass again; the first, cold request is reported apart.
Side by side, in one run:

* attention: the weights (every layer's and head's maps, head means, rollout);
* norm: Kobayashi et al.'s ‖α f(x)‖ (value norms through each head's output projection);
* norm, layer 0 + summed: one layer (``layer_index`` 0) and its ‖Σ_h α f(x)‖;
* flow: attention flow (only within its bound, N · L⁴ ≤ 10⁷: "over the bound" otherwise);
* ablate: two heads switched off, other ones in each request (so each pays for its second
  forward pass, then its maps and the output's change);
* grad_rollout and head_importance: Chefer et al.'s gradient-weighted rollout and Michel et
  al.'s head importance, another target position in each request (so each pays for its
  forward and backward pass with eager attention, which the two methods share when the
  target is the same);
* value_zeroing: Mohebbi et al.'s context mixing, every layer rerun once per token (only
  within its bound, N · L² ≤ 2¹⁷), a new input in each request (one to three " ." more), so
  each pays for its forward pass too: later views of one input reuse its maps.

24 tokens is within attention flow's bound for both models.

Machines are shared and noisy: read the medians and the ratios to "attention".
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from attnviz.pretrained import MODELS
from attnviz.pretrained.methods import flow_token_limit
from attnviz.pretrained.zeroing import value_zeroing_limit
from attnviz.server.main import create_app
from fastapi.testclient import TestClient

SENTENCE = (
    "the teacher typed a sentence and every layer of the model lit up showing which "
    "earlier words each token looked at the most while the class watched the screen"
)
WORDS = SENTENCE.split()

METHODS: dict[str, dict[str, Any]] = {
    "attention": {},
    "norm": {"method": "norm"},
    "norm, layer 0 + summed": {"method": "norm", "layer_index": 0},
    "flow": {"method": "flow"},
    "ablate": {"ablate": [[0, 0], [1, 1]]},
    "grad_rollout": {"method": "grad_rollout"},
    "head_importance": {"method": "head_importance"},
    "value_zeroing": {"method": "value_zeroing"},
}


def text_of(client: TestClient, model: str, tokens: int) -> str:
    """A text of at most ``tokens`` tokens (close to it) for ``model``'s tokenizer."""
    words = (WORDS * (tokens // len(WORDS) + 2))[:tokens]
    while True:
        body = {"model": model, "texts": [" ".join(words)], "sequence_index": 0, "layer_index": 0}
        response = client.post("/api/v1/models/attention", json=body)
        if response.status_code == 200:
            length = len(response.json()["tokens"][0])
            if length <= tokens:
                return " ".join(words)
            words = words[: len(words) - (length - tokens)]
        else:  # over the model's positions: fewer words
            words = words[: len(words) - 4]


def timed(client: TestClient, body: dict[str, Any]) -> tuple[float, int]:
    start = time.perf_counter()
    response = client.post("/api/v1/models/attention", json=body)
    return (time.perf_counter() - start) * 1000.0, response.status_code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with TestClient(create_app()) as client:
        MODELS.wait(600)
        names = [m["name"] for m in client.get("/api/v1/models").json()["models"]]
        print("## Methods, one input, in-process API (ms, medians)\n")
        print(f"{args.reps} warm requests each (the recorded pass kept); cold = the first.\n")
        print("| model | tokens | cold (attention) | " + " | ".join(METHODS) + " |")
        print("|---|---|---|" + "---|" * len(METHODS))
        for name in names:
            layers = client.get("/api/v1/models").json()["models"][names.index(name)]["num_layers"]
            for tokens in (24, 128, 512):
                text = text_of(client, name, tokens)
                base = {
                    "model": name,
                    "texts": [text],
                    "sequence_index": 0,
                    "display_size": 64,
                    "encoding": "base64_float32",
                }
                cold, _ = timed(client, {**base, "texts": [text + " ."]})
                cells = []
                for fields in METHODS.values():
                    if fields.get("method") == "flow" and tokens > flow_token_limit(layers):
                        cells.append("over the bound")
                        continue
                    if fields.get("method") == "value_zeroing" and tokens > value_zeroing_limit(
                        layers
                    ):
                        cells.append("over the bound")
                        continue
                    times = []
                    for rep in range(args.reps + 1):
                        if "ablate" in fields:  # other heads each time: nothing kept
                            fields = {"ablate": [[0, rep], [1, rep]]}
                        if fields.get("method") == "value_zeroing":  # another input each time
                            fields = {**fields, "texts": [text + " ." * (rep + 2)]}
                        if fields.get("method") in ("grad_rollout", "head_importance"):
                            offset = 0 if fields["method"] == "grad_rollout" else args.reps + 1
                            fields = {**fields, "target_index": rep + offset}  # nothing kept
                        ms, code = timed(client, {**base, **fields})
                        assert code == 200, (name, fields, code)
                        times.append(ms)
                    cells.append(f"{statistics.median(times[1:]):.0f}")
                print(f"| {name} | {tokens} | {cold:.0f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
