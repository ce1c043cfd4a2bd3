"""Memory back after every way a request ends: the server's RSS 10 s after, against idle.

Usage (from the repository root):  .venv/bin/python -m benchmarks.memory_release

Against ``python -m attnviz`` on loopback with SmolLM2 (issue 53, finding 1: RSS stayed
0.6-1.6 GiB over the idle figure after cancelled and timed-out computations), it prints,
for each way a request ends, the status, the peak RSS growth while it ran and the RSS 10 s
after it ended, against the server's idle RSS measured after a warm-up request:

1. done: four concurrent head downloads of a 4,000-token input (exact maps, float32);
2. client gone, one-shot: the maps of a 4,000-token input (display_size 64), the client
   leaving 3 s after its computation started (GET /healthz's ``work``);
3. client gone, stream: the streamed grid of the same input, leaving after its first layer;
4. timed out, one-shot (a second server with ATTNVIZ_COMPUTE_TIMEOUT_S=0.5): the maps of
   the 4,000-token input, answered 503;
5. timed out, stream (same server): the streamed grid, ended by its time budget (the
   longest wait for a layer: its first takes longer than 0.5 s here).

Target (docs/security.md): each RSS 10 s after within 64 MiB of the idle figure.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2 as httpx
from attnviz.devtools import live_process

from benchmarks.decoder import prompt_of
from benchmarks.hostile import SMOLLM2, MiB, rss_bytes, sampled, wait_for_models

SETTLE_S = 10.0
"""Seconds after a request ends before its RSS is read (the issue's figure)."""


def work(client: httpx.Client) -> dict[str, int]:
    return client.get("/healthz").json()["work"]  # type: ignore[no-any-return]


def idle(client: httpx.Client) -> None:
    """Until the pool computes nothing and no long work runs or waits."""
    while True:
        now = work(client)
        if now["queued"] == now["computing"] == now["long_running"] == now["long_waiting"] == 0:
            return
        time.sleep(0.1)


def leave_after(url: str, path: str, body: dict[str, Any], ready: Callable[[bytes], bool]) -> int:
    """Send ``body`` on a socket, read until ``ready(received)``, then close it: the bytes
    received."""
    parts = urlsplit(url)
    payload = json.dumps(body).encode()
    with socket.create_connection((parts.hostname, parts.port)) as connection:
        connection.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            + payload
        )
        connection.settimeout(0.05)  # ready() is asked while no byte comes too
        received = b""
        while not ready(received):
            try:
                chunk = connection.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            received += chunk
        connection.shutdown(socket.SHUT_RDWR)
    return len(received)


def held_mib(client: httpx.Client) -> tuple[float, float]:
    """What the caches hold now (GET /healthz's ``held``): (in memory: kept passes and
    cached responses; on disk, memory-mapped: kept passes larger than the memory budget)."""
    held = client.get("/healthz").json()["held"]
    return (held["recordings"] + held["responses"]) / MiB, held["recordings_on_disk"] / MiB


def rss_parts(pid: int) -> tuple[float, float]:
    """(RssAnon, RssFile) of a process in MiB: memory it holds, and file pages mapped in
    (a kept pass memory-mapped from disk: the page cache, dropped under memory pressure)."""
    parts = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("RssAnon:", "RssFile:")):
            parts[line.split(":")[0]] = int(line.split()[1]) / 1024
    return parts["RssAnon"], parts["RssFile"]


def case(name: str, client: httpx.Client, pid: int, run: Callable[[], str]) -> dict[str, Any]:
    """Run one way of ending; the RSS figures around it."""
    idle(client)
    with sampled(pid) as rss:
        started = time.perf_counter()
        status = run()
        seconds = time.perf_counter() - started
        idle(client)
    time.sleep(SETTLE_S)
    return {
        "case": name,
        "status": status,
        "s": seconds,
        "peak_growth_mib": (rss["peak"] - rss["before"]) / MiB,
        "after_10s_mib": rss_bytes(pid) / MiB,
        "anon_file_mib": rss_parts(pid),
        "held_mib": held_mib(client),
    }


def ways(url: str, client: httpx.Client, text: str, timed_out: bool) -> list[tuple[str, Any]]:
    maps = {"model": SMOLLM2, "texts": [text], "sequence_index": 0, "display_size": 64}
    grid = {"model": SMOLLM2, "texts": [text], "display_size": 64}

    def downloads() -> str:
        statuses: list[int] = []

        def one(head: int) -> None:
            body = {"model": SMOLLM2, "texts": [text], "layer_index": 0, "head_index": head}
            with client.stream("POST", "/api/v1/models/attention/download", json=body) as r:
                for _ in r.iter_bytes():
                    pass
                statuses.append(r.status_code)

        threads = [threading.Thread(target=one, args=(head,)) for head in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return "/".join(str(s) for s in sorted(statuses))

    def gone_one_shot() -> str:
        computing: list[float] = []

        def ready(received: bytes) -> bool:  # 3 s after its computation started
            assert not received, "answered before the client left"
            if not computing and work(client)["computing"] > 0:
                computing.append(time.monotonic())
            return bool(computing) and time.monotonic() - computing[0] > 3

        leave_after(url, "/api/v1/models/attention", {**maps, "texts": [f"left {text}"]}, ready)
        return "left"

    def gone_stream() -> str:
        def first_layer(received: bytes) -> bool:
            return b'"type":"layer"' in received.replace(b" ", b"")

        leave_after(
            url, "/api/v1/models/attention/layers", {**grid, "texts": [f"gone {text}"]}, first_layer
        )
        return "left"

    def timed_out_one_shot() -> str:
        return str(
            client.post(
                "/api/v1/models/attention", json={**maps, "texts": [f"slow {text}"]}
            ).status_code
        )

    def timed_out_stream() -> str:
        lines = []
        with client.stream(
            "POST", "/api/v1/models/attention/layers", json={**grid, "texts": [f"late {text}"]}
        ) as r:
            lines = [json.loads(line)["type"] for line in r.iter_lines()]
        return f"{r.status_code} {lines[-1] if lines else ''}"

    if timed_out:
        return [
            ("4. timed out, one-shot", timed_out_one_shot),
            ("5. timed out, stream", timed_out_stream),
        ]
    return [
        ("1. done: 4 concurrent head downloads", downloads),
        ("2. client gone, one-shot", gone_one_shot),
        ("3. client gone, stream", gone_stream),
    ]


def run_server(env: dict[str, str], text: str, timed_out: bool) -> None:
    with (
        live_process(env=env, timeout_s=300) as (url, process),
        httpx.Client(base_url=url, timeout=600) as client,
    ):
        wait_for_models(client)
        # the warm-up: the model's first pass, the allocator's arenas, the caches
        client.post("/api/v1/models/attention", json={"model": SMOLLM2, "texts": ["warm up"]})
        idle(client)
        time.sleep(SETTLE_S)
        baseline = rss_bytes(process.pid) / MiB
        anon, _ = rss_parts(process.pid)
        print(f"  idle RSS after a warm-up: {baseline:.0f} MiB (anonymous {anon:.0f} MiB)")
        for name, run in ways(url, client, text, timed_out):
            for again in ("", " (again)"):  # the second: what stays is held, or leaks
                row = case(name + again, client, process.pid, run)
                memory, disk = row["held_mib"]
                row_anon, row_file = row["anon_file_mib"]
                print(
                    f"  {row['case']:<48} {row['status']:>16} {row['s']:6.1f} s  peak +"
                    f"{row['peak_growth_mib']:5.0f} MiB | 10 s after: RSS "
                    f"{row['after_10s_mib'] - baseline:+5.0f} MiB over idle, anonymous "
                    f"{row_anon - anon:+5.0f} (caches {memory:.0f}), file-mapped "
                    f"{row_file:4.0f} (kept passes on disk {disk:.0f})"
                )


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from attnviz.pretrained import ModelRegistry

    registry = ModelRegistry()
    registry.configure([], packaged=[SMOLLM2])
    registry.load()
    text = prompt_of(registry.get(SMOLLM2), 4000)
    del registry
    env = {"ATTNVIZ_PACKAGED_MODELS": json.dumps([SMOLLM2])}
    print("Server A (default settings)")
    run_server(env, text, timed_out=False)
    print("Server B (ATTNVIZ_COMPUTE_TIMEOUT_S=0.5)")
    run_server({**env, "ATTNVIZ_COMPUTE_TIMEOUT_S": "0.5"}, text, timed_out=True)


if __name__ == "__main__":
    main()
