"""Isolation on a real server: a large request does not block small ones, and the
compute time budget cuts a request off without harming the server."""

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from attnviz.devtools import live_process

pytestmark = pytest.mark.slow  # times small requests against the largest, in a real server

LARGEST = {  # B=1, H=8, L=2048: the largest the default limits allow, with verification
    "sequences": [[1 + i % 99 for i in range(2048)]],
    "d_model": 512,
    "num_heads": 8,
    "mask": "padding_causal",
    "verify": True,
    "encoding": "base64_float32",
}
SMALL = {"sequences": [[5, 6, 7]], "seed": 3}


def post(url: str, body: dict[str, Any], timeout: float = 120) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url + "/api/v1/attention",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise KeyError("Threads")


def test_small_requests_answer_within_a_second_while_the_largest_runs() -> None:
    with live_process() as (url, _):
        done: dict[str, float] = {}

        def large() -> None:
            status, _ = post(url, LARGEST)
            assert status == 200
            done["large"] = time.perf_counter()

        worker = threading.Thread(target=large)
        worker.start()
        time.sleep(0.3)  # the large request is computing now
        start = time.perf_counter()
        with urllib.request.urlopen(url + "/healthz", timeout=5) as response:
            assert response.status == 200
        health_s = time.perf_counter() - start
        start = time.perf_counter()
        status, body = post(url, SMALL, timeout=5)
        small_s = time.perf_counter() - start
        finished_small = time.perf_counter()
        worker.join(timeout=120)
        assert status == 200 and body["shape"] == [1, 2, 3, 3]
        assert health_s < 1.0 and small_s < 1.0, (health_s, small_s)
        assert "large" in done and done["large"] > finished_small, "the large one was still running"


def test_compute_time_budget_answers_503_and_the_server_keeps_serving() -> None:
    # No pretrained model: its background loading (and the tokenizers' thread pool) would
    # add threads of its own while this counts the compute pool's.
    env = {"ATTNVIZ_COMPUTE_TIMEOUT_S": "0.05", "ATTNVIZ_PACKAGED_MODELS": "false"}
    with live_process(env=env) as (url, process):
        before = threads_of(process.pid)
        for seed in range(4):
            status, body = post(url, {**LARGEST, "seed": seed})
            assert status == 503
            assert "ATTNVIZ_COMPUTE_TIMEOUT_S" in body["detail"][0]["msg"]
        with urllib.request.urlopen(url + "/healthz", timeout=5) as response:
            assert response.status == 200
        time.sleep(3)  # the cut-off computations finish in the pool's threads
        assert threads_of(process.pid) <= before + 2, "no thread leak: the pool stays bounded"
