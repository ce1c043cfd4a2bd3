"""Two real server processes give bit-identical answers for the same request (stateless
replicas: any replica recomputes any view from the request alone, docs/scaling.md)."""

import json
import urllib.request
from typing import Any

import pytest
from attnviz.devtools import live_process, live_server

from tests.pretrained.support import require_pretrained_extra
from tests.support.api import wait_model_ready

pytestmark = pytest.mark.slow  # starts server processes

REQUEST = {
    "sequences": ["the cat sat on the mat", "a dog"],
    "d_model": 64,
    "num_heads": 8,
    "seed": 1234,
    "mask": "padding_causal",
}


def post_attention(base_url: str, body: dict[str, Any], path: str = "/api/v1/attention") -> Any:
    request = urllib.request.Request(
        f"{base_url}{path}",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def test_same_seed_same_weights_across_two_server_processes() -> None:
    with live_server() as first_url, live_server() as second_url:
        first = post_attention(first_url, REQUEST)
        second = post_attention(second_url, REQUEST)
        other_seed = post_attention(second_url, {**REQUEST, "seed": 1235})
    assert first["shape"] == [2, 8, 6, 6]
    # JSON floats round-trip exactly, so equal lists mean bit-identical float32 values.
    assert first["weights"] == second["weights"]
    assert first["weights"] != other_seed["weights"]


def test_two_replicas_draw_the_same_pretrained_maps() -> None:
    require_pretrained_extra()
    env = {"ATTNVIZ_PACKAGED_MODELS": '["all-MiniLM-L6-v2"]'}
    body = {"texts": ["The cat sat on the mat."], "sequence_index": 0, "display_size": 8}
    answers = []
    for _ in range(2):
        with live_process(env=env, timeout_s=300) as (url, _):
            wait_model_ready(url, "all-MiniLM-L6-v2")
            answers.append(post_attention(url, body, "/api/v1/models/attention"))
    first, second = answers
    assert first["shape"][0] == 6 and first["attentions"] == second["attentions"]
    assert first["layer_mean"] == second["layer_mean"] and first["rollout"] == second["rollout"]
