"""Two real server processes give bit-identical weights for the same request."""

import json
import urllib.request
from typing import Any

from attnviz.devtools import live_server

REQUEST = {
    "sequences": ["the cat sat on the mat", "a dog"],
    "d_model": 64,
    "num_heads": 8,
    "seed": 1234,
    "mask": "padding_causal",
}


def post_attention(base_url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        f"{base_url}/api/v1/attention",
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
