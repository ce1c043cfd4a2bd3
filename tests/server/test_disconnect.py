"""A request whose client leaves stops its computation, and long work leaves a worker to
short requests (issue 42, class 8).

A real server (``python -m attnviz``, uvicorn) serves a randomly initialised decoder big
enough that a request computes for seconds on two cores. The client sends a request and
leaves after 1.5 s (its read times out and it closes the connection). Measured from
outside, in CPU-seconds of the server process (/proc): the server was working when the
client left, and within a second it has stopped (under 0.4 CPU-s in the 2 s after that),
where before it ran the request to its end. Each heavy plain route: the pretrained maps
(a long input's pooled grid) and the head atlas (one pass per text).

Long work (an atlas not cached, a pass over LONG_WORK_TOKENS tokens, a gradient method)
runs on all compute workers but one: a short request is answered within 2 s while two
long ones run (one computing, one waiting), and a third long one is refused with 503 and
Retry-After (tests/server/test_long_share.py: which requests are long).
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


GRID = (  # the streamed grid of the same long input: 2,000 tokens, over LONG_WORK_TOKENS
    "/api/v1/models/attention/layers",
    {"model": MODEL, "texts": [LONG_TEXT], "display_size": 64},
)
LONG_LEAVE_S = 6.0  # each long request's client leaves after this long without a byte


def settle(pid: int, timeout_s: float = 20) -> None:
    """Wait until the server is idle (under 0.1 CPU-s in 0.5 s): an earlier test's
    computations stopped, its long computations' slots free."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        start = cpu_seconds(pid)
        time.sleep(0.5)
        if cpu_seconds(pid) - start < 0.1:
            return
    pytest.fail(f"the server was still computing after {timeout_s:g} s")


def two_long_requests(url: str, first_word: str) -> tuple[list[threading.Thread], list[int | str]]:
    """The maps and the streamed grid of a 2,000-token input, each in a thread of its own
    (started): one computes, the other waits for a long computation's slot. Each client
    leaves after LONG_LEAVE_S without a byte (the status, or "left", goes to the list).

    The input starts with ``first_word``, one per test: a pass an earlier test's request
    completed is kept for tiles, and a view of a kept pass is short work, not long."""
    ended: list[int | str] = []
    text = f"{first_word} {LONG_TEXT}"

    def ask(path: str, body: dict[str, object]) -> None:
        try:
            response = httpx.post(
                url + path, json=body, timeout=httpx.Timeout(60, read=LONG_LEAVE_S)
            )
            ended.append(response.status_code)
        except httpx.ReadTimeout:
            ended.append("left")

    routes = [(path, {**body, "texts": [text]}) for path, body in (ROUTES["maps"], GRID)]
    threads = [threading.Thread(target=ask, args=route) for route in routes]
    for thread in threads:
        thread.start()
    return threads, ended


def test_a_short_request_is_answered_while_two_long_inputs_run(server: tuple[str, int]) -> None:
    """A pretrained model's pass over more than LONG_WORK_TOKENS tokens is long work, as an
    atlas is: two of them hold one compute worker (of 2) and wait for it, and a sentence
    through the same model is answered at once on the other."""
    url, pid = server
    settle(pid)
    before = cpu_seconds(pid)
    threads, ended = two_long_requests(url, "red")
    time.sleep(2.5)  # both admitted: one computing, one waiting for its turn
    assert cpu_seconds(pid) - before > 0.5 * 2.5, "the server was not computing"
    started = time.monotonic()
    short = httpx.post(
        f"{url}/api/v1/models/attention",
        json={"model": MODEL, "texts": ["the cat sat"], "sequence_index": 0},
        timeout=30,
    )
    waited = time.monotonic() - started
    assert short.status_code == 200, short.text
    assert waited < 2.0, f"the short request waited {waited:.1f} s"
    assert all(thread.is_alive() for thread in threads), f"a long one ended first: {ended}"
    for thread in threads:
        thread.join(60)
    assert len(ended) == 2


def test_a_third_long_request_is_refused_with_retry_after(server: tuple[str, int]) -> None:
    """With one long request computing and one waiting (2 workers), a third (here a
    gradient method, long whatever its length) is refused at once: 503, Retry-After,
    type "busy", naming texts."""
    url, pid = server
    settle(pid)
    threads, ended = two_long_requests(url, "tree")
    time.sleep(2.5)  # both admitted: one computing, one waiting for its turn
    started = time.monotonic()
    third = httpx.post(
        f"{url}/api/v1/models/attention",
        json={"model": MODEL, "texts": ["the cat sat"], "sequence_index": 0,
              "method": "grad_rollout"},
        timeout=10,
    )  # fmt: skip
    assert time.monotonic() - started < 2.0  # refused, not queued
    assert third.status_code == 503, third.text
    assert third.headers["retry-after"] == "30"
    detail = third.json()["detail"][0]
    assert detail["type"] == "busy"
    assert detail["loc"] == ["body", "texts"]
    assert "the grad_rollout maps can be asked again in 30 s" in detail["msg"]
    assert all(thread.is_alive() for thread in threads), f"a long one ended first: {ended}"
    for thread in threads:
        thread.join(60)
    assert len(ended) == 2
