"""A request whose client leaves stops its computation, and long work leaves a worker to
short requests (issue 42, class 8).

A real server (``python -m attnviz``, uvicorn) serves a randomly initialised decoder big
enough that a request computes for seconds on two cores. The client sends a request and
leaves after 1.5 s (its read times out and it closes the connection). Measured from
outside, in CPU-seconds of the server process (/proc): the server was working when the
client left, and within a second it has stopped (under 0.4 CPU-s in the 2 s after that),
where before it ran the request to its end. Each heavy plain route: the pretrained maps
(a long input's pooled grid) and the head atlas (one pass per text).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from attnviz.devtools import live_process

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers
from tests.support.api import wait_model_ready

pytestmark = pytest.mark.slow  # a server process and seconds of computing per route

MODEL = "slow-llama"
LEAVE_AFTER_S = 1.5
STOPPED_WITHIN_S = 1.0  # the poll (0.2 s) and one layer's work
IDLE_CPU_S = 0.4  # what the server may use in the 2 s after that


def save_slow_llama(folder: Path) -> Path:
    """A Llama of 16 layers x 12 heads, d_model 768 (random weights), with the tiny word
    tokenizer: about 5 s for a 2,000-token pass on two cores."""
    return tiny.save_tiny(
        "llama",
        folder,
        hidden_size=768,
        intermediate_size=1536,
        num_hidden_layers=16,
        num_attention_heads=12,
        num_key_value_heads=12,
        max_position_embeddings=4096,
    )


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` and its threads (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    require_transformers()
    folder = save_slow_llama(tmp_path_factory.mktemp("disconnect") / MODEL)
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(folder)]),
        "ATTNVIZ_PACKAGED_MODELS": "false",
        "ATTNVIZ_COMPUTE_TIMEOUT_S": "300",
        "ATTNVIZ_ATLAS_TIMEOUT_S": "300",
        "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("cache")),  # no atlas from an earlier run
    }
    with live_process(env=env, timeout_s=60) as (url, process):
        wait_model_ready(url, MODEL)
        yield url, process.pid


LONG_TEXT = " ".join(tiny.WORDS * 80)  # 2,000 tokens
ROUTES = {
    "maps": (
        "/api/v1/models/attention",
        {"model": MODEL, "texts": [LONG_TEXT], "sequence_index": 0, "display_size": 64},
    ),
    # 32 passes of 256 tokens (each text is cut there) and the seeded random sequences: 20 s
    "atlas": ("/api/v1/models/heads", {"model": MODEL, "texts": [LONG_TEXT[:2000]] * 32}),
}


@pytest.mark.parametrize("route", ROUTES)
def test_a_client_that_leaves_stops_its_computation(server: tuple[str, int], route: str) -> None:
    url, pid = server
    path, body = ROUTES[route]
    before = cpu_seconds(pid)
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
        httpx.post(url + path, json=body, timeout=httpx.Timeout(60, read=LEAVE_AFTER_S))
    left = cpu_seconds(pid)
    assert left - before > 0.5 * LEAVE_AFTER_S, "the server was not computing"
    time.sleep(STOPPED_WITHIN_S)
    start = cpu_seconds(pid)
    time.sleep(2)
    used = cpu_seconds(pid) - start
    assert used < IDLE_CPU_S, f"{used:.2f} CPU-s in the 2 s after the client left"
    assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200  # and it still answers


def test_a_client_that_waits_gets_its_answer(server: tuple[str, int]) -> None:
    url, _ = server
    path, body = ROUTES["maps"]
    answer = httpx.post(url + path, json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == MODEL


def test_a_short_request_is_answered_while_two_atlases_run(server: tuple[str, int]) -> None:
    """Long work (an atlas not cached) runs on all compute workers but one (2 here): the
    first atlas computes, the second waits for its turn, a third is refused with 503 and
    Retry-After, and a short request meanwhile gets a worker at once."""
    url, _ = server
    path, body = ROUTES["atlas"]
    ended: list[str] = []

    def ask() -> None:
        try:  # each leaves after 8 s: its work then stops (the tests above)
            httpx.post(url + path, json=body, timeout=httpx.Timeout(60, read=8))
        except httpx.ReadTimeout:
            ended.append("left")

    atlases = [threading.Thread(target=ask) for _ in range(2)]
    for thread in atlases:
        thread.start()
    time.sleep(3)  # both planned and admitted: one computing, one waiting for its turn
    third = httpx.post(url + path, json=body, timeout=10)
    assert third.status_code == 503, third.text
    assert third.headers["retry-after"] == "30"
    assert third.json()["detail"][0]["type"] == "busy"
    assert third.json()["detail"][0]["loc"] == ["body", "texts"]
    started = time.monotonic()
    short = httpx.post(
        f"{url}/api/v1/models/attention",
        json={"model": MODEL, "texts": ["the cat sat"]},
        timeout=30,
    )
    waited = time.monotonic() - started
    assert short.status_code == 200, short.text
    assert waited < 2.0, f"the short request waited {waited:.1f} s"
    for thread in atlases:
        thread.join()
    assert ended == ["left", "left"]  # neither atlas was done before its client left
