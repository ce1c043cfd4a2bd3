"""AttnViz on Ray Serve (attnviz.server.ray_serve; issue 43).

One local Ray (2 CPUs, no dashboard) serves the app in two replicas behind Serve's HTTP
proxy for the whole module; the plain app (TestClient, the same settings) answers the
same requests. Through Serve the bodies are the plain server's, byte for byte, but for
their timings, from both replicas; the page draws in Chromium through the proxy; a killed
replica is replaced and answers the same. The settings reach the replicas only through
:func:`build`'s runtime_env: they are set in this process after Ray has started.

The options of a deployment (no Ray needed) are checked first.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from attnviz.devtools import free_port
from attnviz.server.presets import DEFAULT_PRESET
from attnviz.server.ray_serve import (
    APP_NAME,
    DEPLOYMENT_NAME,
    MAX_ONGOING_REQUESTS,
    deployment_options,
    serve_on_ray,
)

from tests.support.browser import close_page, new_page, wait_drawn, wait_for_heads
from tests.support.cli import ctrl_c_as_on_a_terminal
from tests.support.local_ray import start_local_ray

pytestmark = pytest.mark.ray  # make test runs these after the rest (scripts/suite.py)

REPLICAS = 2
ENV = {
    "ATTNVIZ_PACKAGED_MODELS": '["all-MiniLM-L6-v2"]',
    "ATTNVIZ_ACCESS_LOG": "false",
    # torch's float sums depend on its thread count: one thread in each process (a replica
    # reserving half a CPU would default to one; the plain server to every core).
    "ATTNVIZ_TORCH_THREADS": "1",
}
"""The settings of both servers."""
MINILM = {
    "model": "all-MiniLM-L6-v2",
    "texts": ["Attention shows what a trained model looks at, token by token."],
    "sequence_index": 0,
}
CUSTOM = {"sequences": ["the cat sat on the mat", "a dog"], "num_heads": 4, "mask": "padding"}
REQUESTS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "toy default preset": ("POST", "/api/v1/attention", None),
    "toy custom": ("POST", "/api/v1/attention", CUSTOM),
    "MiniLM": ("POST", "/api/v1/models/attention", MINILM),
    "MiniLM NDJSON stream": ("POST", "/api/v1/models/attention/layers", MINILM),
    "models list": ("GET", "/api/v1/models", None),
    "page /": ("GET", "/", None),
    "page /models": ("GET", "/models", None),
    "static JS": ("GET", "/static/js/attnviz.js", None),
}
TIMINGS = re.compile(rb'"(compute_ms|total_ms|load_s)":[-+0-9.eE]+')
"""The only fields that differ between two servers computing the same thing (times)."""
REPLICA_PREFIX = f"SERVE_REPLICA::{APP_NAME}#{DEPLOYMENT_NAME}#"
"""The name of a replica actor (namespace "serve"), less its replica id."""
WAIT_S = 300
"""The most a replica may take to start and load MiniLM on two busy cores (s)."""


def timeless(body: bytes) -> bytes:
    """``body`` with its timings zeroed."""
    return TIMINGS.sub(rb'"\1":0', body)


# The options of a deployment ------------------------------------------------------------


def test_a_fixed_number_of_replicas_reserves_cpus_and_forwards_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ATTNVIZ_MAX_SEQ_LEN", "40")
    monkeypatch.setenv("NOT_ATTNVIZ", "x")
    monkeypatch.delenv("ATTNVIZ_TORCH_THREADS", raising=False)
    options = deployment_options(2, 0.5, env={"ATTNVIZ_DEVICE": "cpu"})
    assert options["name"] == DEPLOYMENT_NAME
    assert options["num_replicas"] == 2
    assert options["max_ongoing_requests"] == MAX_ONGOING_REQUESTS
    assert "autoscaling_config" not in options
    assert "placement_group_bundles" not in options
    actor = options["ray_actor_options"]
    assert (actor["num_cpus"], actor["num_gpus"]) == (0.5, 0)
    env = actor["runtime_env"]["env_vars"]
    assert env["ATTNVIZ_MAX_SEQ_LEN"] == "40"
    assert env["ATTNVIZ_DEVICE"] == "cpu"
    assert env["ATTNVIZ_TORCH_THREADS"] == "1"  # half a CPU: one torch thread
    assert "NOT_ATTNVIZ" not in env


def test_the_torch_threads_given_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNVIZ_TORCH_THREADS", "3")
    env = deployment_options(1, 8)["ray_actor_options"]["runtime_env"]["env_vars"]
    assert env["ATTNVIZ_TORCH_THREADS"] == "3"
    monkeypatch.delenv("ATTNVIZ_TORCH_THREADS")
    env = deployment_options(1, 8)["ray_actor_options"]["runtime_env"]["env_vars"]
    assert env["ATTNVIZ_TORCH_THREADS"] == "8"


def test_a_replica_of_several_gpus_is_one_bundle_on_one_node() -> None:
    options = deployment_options(1, 4, 2)
    assert options["ray_actor_options"]["num_gpus"] == 2
    assert options["placement_group_bundles"] == [{"CPU": 4, "GPU": 2}]
    assert options["placement_group_strategy"] == "STRICT_PACK"
    assert "placement_group_bundles" not in deployment_options(1, 4, 1)
    assert "placement_group_bundles" not in deployment_options(1, 4, 0.5)


def test_autoscaling_replaces_the_number_of_replicas() -> None:
    config = {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 2}
    options = deployment_options(autoscaling=config)
    assert options["autoscaling_config"] == config
    assert "num_replicas" not in options
    with pytest.raises(ValueError, match="replicas and autoscaling"):
        deployment_options(2, autoscaling=config)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"replicas": 0}, "replicas: 0"),
        ({"num_cpus": -1}, "num_cpus"),
        ({"num_gpus": float("nan")}, "num_gpus"),
        ({"num_gpus": 1.5}, "whole ones"),
        ({"max_ongoing_requests": 0}, "max_ongoing_requests"),
    ],
)
def test_impossible_options_are_refused(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        deployment_options(**arguments)


@pytest.mark.slow
def test_importing_the_module_imports_neither_ray_nor_the_server() -> None:
    code = (
        "import sys, attnviz.server.ray_serve as m; "
        "assert 'ray' not in sys.modules and 'attnviz.server.main' not in sys.modules, "
        "sorted(k for k in sys.modules if k == 'ray' or k == 'attnviz.server.main')"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_the_builder_and_the_module_app_are_serve_applications() -> None:
    pytest.importorskip("ray", reason="Ray is the optional extra attnviz[ray]")
    from attnviz.server import ray_serve
    from ray.serve import Application
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

    built = call_user_app_builder_with_args_if_necessary(
        ray_serve.app_builder, {"max_replicas": "3", "num_cpus": "0.5"}
    )
    assert isinstance(built, Application)
    deployment = built._bound_deployment  # what serve.run deploys
    assert deployment.name == DEPLOYMENT_NAME
    assert deployment._deployment_config.autoscaling_config.max_replicas == 3
    assert deployment.ray_actor_options["num_cpus"] == 0.5
    assert isinstance(ray_serve.app, Application)


@pytest.mark.slow
def test_attnviz_serve_ray_starts_a_local_ray_serves_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """``attnviz serve --ray`` (serve_on_ray): a Ray of its own, the URL printed, Ctrl-C
    stops Serve and that Ray (run before the module's Ray starts: one Ray at a time here)."""
    pytest.importorskip("ray", reason="Ray is the optional extra attnviz[ray]")
    port = free_port()
    command = [
        sys.executable, "-m", "attnviz.cli", "serve", "--ray", "--replicas", "1",
        "--host", "127.0.0.1", "--port", str(port), "--num-cpus", "0.5",
    ]  # fmt: skip
    env = {**os.environ, "ATTNVIZ_PACKAGED_MODELS": "false", "ATTNVIZ_ACCESS_LOG": "false"}
    env.pop("RAY_ADDRESS", None)
    stderr = tmp_path / "stderr.txt"  # Ray's and Serve's logs; shown if the start fails
    with stderr.open("w") as errors:
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            preexec_fn=ctrl_c_as_on_a_terminal,
        )
    watchdog = threading.Timer(600, process.kill)  # a hung start fails, not hangs, the test
    watchdog.start()
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:  # printed once the replica has started
            lines.append(line)
            if line.startswith("AttnViz on Ray Serve"):
                break
        assert line.startswith(f"AttnViz on Ray Serve at http://127.0.0.1:{port}/ (1 replica "), (
            "".join(lines)[-4000:] + stderr.read_text(errors="replace")[-8000:]
        )
        assert "Ctrl-C" in line
        response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30)
        assert response.status_code == 200
        assert response.json()["status"] == "ok"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 0
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()


# The app served by Ray Serve -----------------------------------------------------------


@dataclass(frozen=True)
class OnRay:
    """The app on a local Ray: Serve's proxy at ``url``, Serve's logs in ``logs``."""

    url: str
    logs: Path

    def replica_of(self, response: httpx.Response) -> str:
        """The id of the replica that answered ``response`` (its request id is in the
        replica's log; waited for up to 120 s, logs are written after the answer)."""
        request_id = response.headers["x-request-id"]
        deadline = time.monotonic() + 120
        while True:
            for log in self.logs.glob(f"replica_{APP_NAME}_{DEPLOYMENT_NAME}_*.log"):
                if request_id in log.read_text(errors="replace"):
                    return log.stem.rsplit("_", 1)[1]
            assert time.monotonic() < deadline, f"no replica logged request {request_id}"
            time.sleep(0.1)


def replica_ids() -> set[str]:
    """The ids of the app's live replica actors."""
    import ray

    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    return {n.removeprefix(REPLICA_PREFIX) for n in names if n.startswith(REPLICA_PREFIX)}


def until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Poll ``condition`` every half second until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.5)


def models_ready_in(served: OnRay, client: httpx.Client, replicas: set[str]) -> None:
    """Until every one of ``replicas`` has said that its models are loaded."""
    ready: set[str] = set()

    def all_ready() -> bool:
        response = client.get("/api/v1/models")
        assert response.status_code == 200, response.text
        if all(m["state"] == "ready" for m in response.json()["models"]):
            ready.add(served.replica_of(response))
        return replicas <= ready

    until(all_ready, f"the models of replicas {replicas} ready")


@pytest.fixture(scope="module")
def on_ray() -> Iterator[OnRay]:
    """The app in :data:`REPLICAS` replicas on a local Ray, its models loaded in each."""
    ray = pytest.importorskip("ray", reason="Ray is the optional extra attnviz[ray]")
    from ray import serve

    saved = dict(os.environ)
    start_local_ray(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        os.environ.update(ENV)  # after Ray started: only build's runtime_env passes them on
        # The Ray of this process is used as it is; serve_on_ray starts Serve, deploys.
        url = serve_on_ray(None, REPLICAS, "127.0.0.1", free_port(), 0.5, 0, blocking=False)
        logs = Path(ray._private.worker._global_node.get_logs_dir_path()) / "serve"
        served = OnRay(url, logs)
        with httpx.Client(base_url=served.url, timeout=60) as client:
            models_ready_in(served, client, replica_ids())
        yield served
    finally:
        serve.shutdown()
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def plain() -> Iterator[Any]:
    """The plain app (TestClient, its lifespan run) with the same settings, models loaded."""
    from tests.server.support import serving

    with serving(ENV) as client:
        yield client


@pytest.fixture(scope="module")
def proxy(on_ray: OnRay) -> Iterator[httpx.Client]:
    """A client of Serve's proxy."""
    with httpx.Client(base_url=on_ray.url, timeout=60) as client:
        yield client


def send(client: Any, method: str, path: str, body: dict[str, Any] | None) -> Any:
    """One request; a POST without a body sends the default preset's request."""
    if method == "GET":
        return client.get(path)
    return client.post(path, json=body or DEFAULT_PRESET.request.model_dump(mode="json"))


@pytest.mark.parametrize("name", list(REQUESTS))
@pytest.mark.usefixtures("pretrained_extra")
@pytest.mark.slow
@pytest.mark.models
def test_both_replicas_answer_byte_for_byte_what_the_plain_server_answers(
    name: str, on_ray: OnRay, proxy: httpx.Client, plain: Any
) -> None:
    method, path, body = REQUESTS[name]
    expected = send(plain, method, path, body)
    assert expected.status_code == 200, expected.text
    answered: set[str] = set()
    for _ in range(40):  # Serve's router picks a replica; both answer within a few
        response = send(proxy, method, path, body)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == expected.headers["content-type"]
        assert timeless(response.content) == timeless(expected.content)
        answered.add(on_ray.replica_of(response))
        if len(answered) == REPLICAS:
            break
    assert answered == replica_ids()
    if path.endswith("/layers"):  # a stream of lines: start, a line per layer, end
        lines = response.content.decode().splitlines()
        assert response.headers["content-type"] == "application/x-ndjson"
        assert lines[0].startswith('{"type":"start"') and lines[-1].startswith('{"type":"end"')
        assert len(lines) == 2 + 6  # MiniLM's 6 layers


@pytest.mark.slow
@pytest.mark.models
@pytest.mark.usefixtures("pretrained_extra")
def test_the_pages_draw_in_chromium_through_serves_proxy(on_ray: OnRay, browser: Any) -> None:
    page = new_page(browser, 1400, 950)
    failed: list[str] = []
    console: list[str] = []
    page.on("requestfailed", lambda request: failed.append(f"failed {request.url}"))
    page.on(
        "response",
        lambda response: (
            failed.append(f"{response.status} {response.url}") if response.status >= 400 else None
        ),
    )
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    try:
        page.goto(on_ray.url + "/")
        wait_for_heads(page, 2)
        page.goto(on_ray.url + "/models")
        wait_drawn(page, "model")
        drawn = page.evaluate("() => document.getElementById('model-grid').data.length")
        assert drawn > 0
        assert page.errors == []
        assert console == []
        assert failed == []
    finally:
        close_page(page)


@pytest.mark.slow
@pytest.mark.models
@pytest.mark.usefixtures("pretrained_extra")
def test_a_killed_replica_is_replaced_and_answers_the_same(
    on_ray: OnRay, proxy: httpx.Client, plain: Any
) -> None:
    import ray
    from ray import serve

    before = replica_ids()
    assert len(before) == REPLICAS
    victim = sorted(before)[0]
    ray.kill(ray.get_actor(REPLICA_PREFIX + victim, namespace="serve"), no_restart=True)

    def replaced() -> bool:
        deployment = serve.status().applications[APP_NAME].deployments[DEPLOYMENT_NAME]
        now = replica_ids()
        return (
            deployment.status == "HEALTHY"
            and deployment.replica_states == {"RUNNING": REPLICAS}
            and victim not in now
            and len(now) == REPLICAS
        )

    started = time.monotonic()
    until(replaced, f"replica {victim} replaced, {REPLICAS} running")
    (new,) = replica_ids() - before
    print(f"replica {victim} replaced by {new} in {time.monotonic() - started:.1f} s")
    models_ready_in(on_ray, proxy, {new})
    expected = timeless(send(plain, "POST", "/api/v1/models/attention", MINILM).content)
    answered: set[str] = set()
    for _ in range(40):
        response = send(proxy, "POST", "/api/v1/models/attention", MINILM)
        assert response.status_code == 200, response.text
        assert timeless(response.content) == expected
        answered.add(on_ray.replica_of(response))
        if new in answered:
            break
    assert new in answered
