"""Isolation on a real server: a large request does not block small ones, and the
compute time budget cuts a request off without harming the server.

Each test waits on the events GET /healthz reports (``work``: computations running on
the pool, and how each one ended), not on the clock: it holds on a busy machine."""

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from attnviz.devtools import live_process

pytestmark = pytest.mark.slow  # small requests beside the largest, in a real server

HUNG_S = 300.0
"""How long an event may take before the server is taken as hung (not a speed bound)."""

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


def work(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url + "/healthz", timeout=HUNG_S) as response:
        assert response.status == 200
        return json.loads(response.read())["work"]  # type: ignore[no-any-return]


def wait_for(url: str, event: Any, what: str) -> dict[str, int]:
    """Poll /healthz until ``event(work)`` holds; the work then. Fails after HUNG_S."""
    deadline = time.monotonic() + HUNG_S
    while not event(now := work(url)):
        assert time.monotonic() < deadline, f"{what}: not after {HUNG_S:g} s ({now})"
        time.sleep(0.02)
    return now


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise KeyError("Threads")


def test_small_requests_are_answered_while_the_largest_runs() -> None:
    with live_process(timeout_s=HUNG_S) as (url, _):
        done = threading.Event()

        def large() -> None:
            status, _ = post(url, LARGEST, timeout=HUNG_S)
            assert status == 200
            done.set()

        worker = threading.Thread(target=large)
        worker.start()
        wait_for(url, lambda w: w["computing"] == 1, "the large request computing")
        status, body = post(url, SMALL, timeout=HUNG_S)
        # answered while the large one still computes: not queued behind it (and /healthz
        # answered meanwhile too, in wait_for and here)
        assert not done.is_set(), "the large one was answered first"
        assert work(url)["computing"] == 1
        assert status == 200 and body["shape"] == [1, 2, 3, 3]
        worker.join(timeout=HUNG_S)
        assert done.is_set()


def test_compute_time_budget_answers_503_and_the_server_keeps_serving() -> None:
    # No pretrained model: its background loading (and the tokenizers' thread pool) would
    # add threads of its own while this counts the compute pool's.
    env = {"ATTNVIZ_COMPUTE_TIMEOUT_S": "0.05", "ATTNVIZ_PACKAGED_MODELS": "false"}
    with live_process(env=env, timeout_s=HUNG_S) as (url, process):
        before = threads_of(process.pid)
        for seed in range(4):
            status, body = post(url, {**LARGEST, "seed": seed}, timeout=HUNG_S)
            assert status == 503
            assert "ATTNVIZ_COMPUTE_TIMEOUT_S" in body["detail"][0]["msg"]
        # the cut-off computations end in the pool's threads, each run to its end (the toy
        # engine's layer has no check inside; its result dropped) or given up while it
        # waited for a worker (a request may hand the pool more than one computation)
        after = wait_for(
            url, lambda w: w["queued"] == w["computing"] == 0, "the cut-off computations ended"
        )
        assert after["finished"] + after["stopped"] >= 4 and after["failed"] == 0, str(after)
        assert threads_of(process.pid) <= before + 2, "no thread leak: the pool stays bounded"
