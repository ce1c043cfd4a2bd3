"""A request whose client leaves stops its computation, and long work leaves a worker to
short requests (issue 42, class 8; issue 53: waits on events, not on the clock).

A real server (``python -m attnviz``, uvicorn) serves a randomly initialised decoder big
enough that a request computes for seconds on two cores. Each test waits on the events
the server reports on GET /healthz (``work``: computations on the pool, long ones running
and waiting, computations stopped before their end), never on a wall-clock guess, so it
holds on a busy machine (``docs/development.md``: the suite under a load generator).

* A client that leaves while its request computes (each heavy plain route: the pretrained
  maps of a long input, the head atlas): the computation stops before its end (counted
  as stopped, not finished) and the server computes nothing more.
* Long work (an atlas not cached, a pass over LONG_WORK_TOKENS tokens, a gradient method)
  runs on all compute workers but one: with two long requests in (one computing, one
  waiting), a short request is answered while both are still unanswered, and a third
  long one is refused at once with 503 and Retry-After (tests/server/test_long_share.py:
  which requests are long).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2 as httpx
import pytest
from attnviz.devtools import live_process

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers
from tests.support.api import wait_model_ready

pytestmark = pytest.mark.slow  # a server process and seconds of computing per route

MODEL = "slow-llama"
HUNG_S = 300.0
"""How long a wait for an event may take before the server is taken as hung: a bound on
a hang, not on speed (the events come within seconds on an idle machine)."""


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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_transformers()
    folder = save_slow_llama(tmp_path_factory.mktemp("disconnect") / MODEL)
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(folder)]),
        "ATTNVIZ_PACKAGED_MODELS": "false",
        "ATTNVIZ_COMPUTE_WORKERS": "2",
        "ATTNVIZ_COMPUTE_TIMEOUT_S": "600",
        "ATTNVIZ_ATLAS_TIMEOUT_S": "600",
        "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("cache")),  # no atlas from an earlier run
    }
    with live_process(env=env, timeout_s=HUNG_S) as (url, _):
        wait_model_ready(url, MODEL, timeout_s=HUNG_S)
        yield url


def work(url: str) -> dict[str, int]:
    """The server's work now (GET /healthz's ``work``)."""
    response = httpx.get(f"{url}/healthz", timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["work"]


def wait_for(url: str, event: Callable[[dict[str, int]], bool], what: str) -> dict[str, int]:
    """Poll /healthz until ``event(work)`` holds; the work then. Fails after HUNG_S."""
    deadline = time.monotonic() + HUNG_S
    while True:
        now = work(url)
        if event(now):
            return now
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {HUNG_S:g} s; the server's work: {now}")
        time.sleep(0.05)


def idle(url: str) -> dict[str, int]:
    """Wait until nothing computes and no long work runs or waits (an earlier test's work
    stopped); the work then."""
    return wait_for(
        url,
        lambda w: w["queued"] == w["computing"] == w["long_running"] == w["long_waiting"] == 0,
        "the server idle",
    )


class Request:
    """A POST sent on a socket of its own, answered in a thread: the test decides when its
    client leaves (:meth:`leave` closes the connection), not a read timeout."""

    def __init__(self, url: str, path: str, body: dict[str, Any]) -> None:
        parts = urlsplit(url)
        payload = json.dumps(body).encode()
        self.socket = socket.create_connection((parts.hostname, parts.port), timeout=HUNG_S)
        self.socket.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + payload
        )
        self.answer = b""
        self.left = False
        self.answered = threading.Event()  # the whole answer came (the server closed)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while chunk := self.socket.recv(65536):
                self.answer += chunk
            if not self.left:  # the server closed the connection: its answer is whole
                self.answered.set()
        except OSError:  # left
            pass

    @property
    def status(self) -> int:
        return int(self.answer.split(b" ", 2)[1])

    def leave(self) -> None:
        """The client goes away: its connection closed."""
        self.left = True
        if not self.answered.is_set():
            self.socket.shutdown(socket.SHUT_RDWR)
        self.socket.close()
        self.thread.join(HUNG_S)


LONG_TEXT = " ".join(tiny.WORDS * 80)  # 2,000 tokens
ROUTES = {
    "maps": (
        "/api/v1/models/attention",
        {"model": MODEL, "texts": [LONG_TEXT], "sequence_index": 0, "display_size": 64},
    ),
    # 32 passes of 256 tokens (each text is cut there) and the seeded random sequences: 20 s
    "atlas": ("/api/v1/models/heads", {"model": MODEL, "texts": [LONG_TEXT[:2000]] * 32}),
}
GRID = (  # the streamed grid of the same long input: 2,000 tokens, over LONG_WORK_TOKENS
    "/api/v1/models/attention/layers",
    {"model": MODEL, "texts": [LONG_TEXT], "display_size": 64},
)


@pytest.mark.parametrize("route", ROUTES)
def test_a_client_that_leaves_stops_its_computation(server: str, route: str) -> None:
    path, body = ROUTES[route]
    before = idle(server)
    request = Request(server, path, {**body, "texts": [f"{route} {t}" for t in body["texts"]]})
    wait_for(server, lambda w: w["computing"] == 1, "the request computing")
    request.leave()
    after = wait_for(server, lambda w: w["computing"] == 0, "the computation ended")
    assert not request.answered.is_set()
    # it stopped at its next check, before its end (a computation run to its end would
    # count as finished, not stopped)
    assert after["stopped"] == before["stopped"] + 1, (before, after)
    assert after["finished"] == before["finished"], (before, after)
    assert httpx.get(f"{server}/healthz", timeout=30).status_code == 200  # and it still answers


def test_a_client_that_waits_gets_its_answer(server: str) -> None:
    path, body = ROUTES["maps"]
    idle(server)
    answer = httpx.post(server + path, json=body, timeout=HUNG_S)
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == MODEL


def two_long(server: str, routes: list[tuple[str, dict[str, Any]]]) -> list[Request]:
    """Send two long requests and wait until one computes and the other waits its turn."""
    idle(server)
    long = [Request(server, path, body) for path, body in routes]
    wait_for(
        server,
        lambda w: w["long_running"] == 1 and w["long_waiting"] == 1,
        "one long request computing, the other waiting",
    )
    return long


def let_go(server: str, long: list[Request]) -> None:
    """Both long requests' clients leave; their work stops."""
    for request in long:
        request.leave()
    idle(server)


def short_answered_beside(server: str, long: list[Request], body: dict[str, Any]) -> None:
    """A sentence through the model is answered while both long requests are unanswered (not
    queued behind them), one of them still computing and the other waiting."""
    short = httpx.post(f"{server}/api/v1/models/attention", json=body, timeout=HUNG_S)
    assert short.status_code == 200, short.text
    assert not any(request.answered.is_set() for request in long)
    now = work(server)
    assert (now["long_running"], now["long_waiting"]) == (1, 1), now


def test_a_short_request_is_answered_while_two_atlases_run(server: str) -> None:
    """Long work (an atlas not cached) runs on all compute workers but one (2 here): the
    first atlas computes, the second waits for its turn, a third is refused with 503 and
    Retry-After, and a short request meanwhile is answered while both are unanswered."""
    path, body = ROUTES["atlas"]
    long = two_long(server, [(path, body), (path, body)])
    try:
        third = httpx.post(server + path, json=body, timeout=HUNG_S)
        assert third.status_code == 503, third.text
        assert third.headers["retry-after"] == "30"
        assert third.json()["detail"][0]["type"] == "busy"
        assert third.json()["detail"][0]["loc"] == ["body", "texts"]
        short_answered_beside(server, long, {"model": MODEL, "texts": ["the cat sat"]})
    finally:
        let_go(server, long)


def long_inputs(first_word: str) -> list[tuple[str, dict[str, Any]]]:
    """The maps and the streamed grid of a 2,000-token input that starts with
    ``first_word``, one per test: a pass an earlier test's request completed is kept for
    tiles, and a view of a kept pass is short work, not long."""
    text = f"{first_word} {LONG_TEXT}"
    return [(path, {**body, "texts": [text]}) for path, body in (ROUTES["maps"], GRID)]


def test_a_short_request_is_answered_while_two_long_inputs_run(server: str) -> None:
    """A pretrained model's pass over more than LONG_WORK_TOKENS tokens is long work, as an
    atlas is: two of them hold one compute worker (of 2) and wait for it, and a sentence
    through the same model is answered on the other while both are unanswered."""
    long = two_long(server, long_inputs("red"))
    try:
        short_answered_beside(
            server, long, {"model": MODEL, "texts": ["the cat sat"], "sequence_index": 0}
        )
    finally:
        let_go(server, long)


def test_a_third_long_request_is_refused_with_retry_after(server: str) -> None:
    """With one long request computing and one waiting (2 workers), a third (here a
    gradient method, long whatever its length) is refused at once: 503, Retry-After,
    type "busy", naming texts."""
    long = two_long(server, long_inputs("tree"))
    try:
        third = httpx.post(
            f"{server}/api/v1/models/attention",
            json={"model": MODEL, "texts": ["the cat sat"], "sequence_index": 0,
                  "method": "grad_rollout"},
            timeout=HUNG_S,
        )  # fmt: skip
        assert third.status_code == 503, third.text
        assert third.headers["retry-after"] == "30"
        detail = third.json()["detail"][0]
        assert detail["type"] == "busy"
        assert detail["loc"] == ["body", "texts"]
        assert "the grad_rollout maps can be asked again in 30 s" in detail["msg"]
        assert not any(request.answered.is_set() for request in long)
    finally:
        let_go(server, long)
