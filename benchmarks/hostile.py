"""Hostile and heavy requests against a real server: what each costs before it is refused.

Usage (from the repository root):  .venv/bin/python -m benchmarks.hostile [--skip-generation]

Against ``python -m attnviz`` on loopback (SmolLM2, Whisper tiny.en and a tiny random ViT),
with the server's resident memory sampled every 20 ms from /proc, it prints for each case
the status, the time to the answer, and the server's RSS growth (peak during the request
over its RSS just before, in MiB):

1. hostile uploads (issue 29, classes 1 and 2): low-rate and lying-header FLAC, WAV and
   Ogg; images whose container and payload disagree; formats outside the allowlist.
   Target: a 4xx within 3 s and at most 64 MiB of RSS growth each.
2. a 4,000-token text with an index out of range (``layer_index`` 99, and the others).
   Target: a 422 naming the field in under 2 s.
3. SmolLM2, the longest admitted prompt (4,032 tokens) + 64 new tokens, streamed grid
   (display_size 64, as the page asks). Target: done within the default time budget (60 s)
   with at most 3 GiB of peak RSS growth, or refused up front; idle RSS 10 s later within
   512 MiB of its level before.
4. a request stopped by its time budget (ATTNVIZ_COMPUTE_TIMEOUT_S=3, on a second server):
   the server's CPU seconds in the 4 s after its 503. Target: at most 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
from attnviz.devtools import live_process

from benchmarks.decoder import prompt_of

MiB = 2**20
SMOLLM2 = "SmolLM2-135M-Instruct"


def rss_bytes(pid: int) -> int:
    """VmRSS of a process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def sampled(pid: int) -> Iterator[dict[str, int]]:
    """Sample the RSS of ``pid`` every 20 ms in the block: {"before", "peak"} in bytes."""
    found = {"before": rss_bytes(pid), "peak": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            found["peak"] = max(found["peak"], rss_bytes(pid))
            time.sleep(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        stop.set()
        thread.join()
        found["peak"] = max(found["peak"], rss_bytes(pid))


def measure(pid: int, send: Callable[[], httpx.Response]) -> dict[str, Any]:
    """One request: status, field named, seconds, RSS growth (MiB)."""
    with sampled(pid) as rss:
        started = time.perf_counter()
        response = send()
        seconds = time.perf_counter() - started
    field = None
    if response.status_code >= 400:
        detail = response.json().get("detail")
        if isinstance(detail, list) and detail:
            field = detail[0]["loc"][-1]
    return {
        "status": response.status_code,
        "field": field,
        "s": seconds,
        "growth_mib": (rss["peak"] - rss["before"]) / MiB,
    }


def hostile_files() -> dict[str, tuple[str, bytes]]:
    """(route field, bytes) of each hostile upload, by name."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from tests.pretrained.media import encoded, tone
    from tests.support import hostile

    ogg60 = encoded(tone(60.0, 300.0, 16000), "ogg", "libopus", 16000)
    files = {
        "FLAC 10 Hz, 3 x 65,535 samples (81 B)": ("audio", hostile.flac_bomb()),
        "FLAC 1 Hz, 200 frames": ("audio", hostile.flac_bomb(rate=1, frames=200)),
        "FLAC says 16 kHz, frames at 10 Hz": (
            "audio",
            hostile.flac_bomb(rate=10, header_rate=16_000, header_samples=16_000),
        ),
        "FLAC says 1 s, holds 410 s": (
            "audio",
            hostile.flac_bomb(rate=16_000, frames=100, header_samples=16_000),
        ),
        "FLAC length unknown, 4,100 s": (
            "audio",
            hostile.flac_bomb(rate=16_000, frames=1000, header_samples=0),
        ),
        "WAV 1 Hz, 100,000 samples": ("audio", hostile.wav_bomb()),
        "WAV 8 kHz, data size unknown, 500 s": (
            "audio",
            hostile.wav_bomb(rate=8000, samples=4_000_000, data_size=0xFFFFFFFF),
        ),
        "Ogg/FLAC 10 Hz": ("audio", hostile.ogg_flac_bomb()),
        "Ogg/FLAC granules say 1 s, holds 410 s": (
            "audio",
            hostile.ogg_flac_bomb(rate=16_000, frames=100, stated_granule=16_000),
        ),
        "Ogg/Opus 60 s, granules say 0": ("audio", hostile.ogg_with_granules(ogg60, 0)),
        "ICO says 256 x 256, holds a 9000 x 9000 PNG": (
            "image",
            hostile.ico_with_png(hostile.png_of_size(9000, 9000)),
        ),
        "PNG 9000 x 9000 (236 KB)": ("image", hostile.png_of_size(9000, 9000)),
        "GIF screen 10 x 10, frame 8000 x 8000": (
            "image",
            hostile.gif_bomb((10, 10), (8000, 8000)),
        ),
        "GIF screen 9000 x 9000": ("image", hostile.gif_bomb((9000, 9000), (10, 10))),
        "WebP canvas 16000 x 16000, payload 100 x 100": (
            "image",
            hostile.webp_canvas((16000, 16000)),
        ),
        "WebP canvas 10 x 10, payload 100 x 100": ("image", hostile.webp_canvas((10, 10))),
    }
    for name, data in hostile.other_formats().items():
        if name != "MPO":  # a JPEG by its bytes: accepted as one
            files[f"{name} (outside the allowlist)"] = ("image", data)
    return files


def warm_up(client: httpx.Client, vit: str) -> None:
    """One valid request of each kind, so that lazy start-up is not counted as growth."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from tests.pretrained.media import png_bytes, tone, wav_bytes

    wav = wav_bytes(tone(1.0))
    for _ in range(2):
        assert client.post("/api/v1/speech", files={"audio": ("a.wav", wav)}).status_code == 200
        response = client.post(
            "/api/v1/vision", files={"image": ("a.png", png_bytes())}, data={"model": vit}
        )
        assert response.status_code == 200, response.text


def uploads(client: httpx.Client, pid: int, vit: str) -> list[dict[str, Any]]:
    rows = []
    for name, (field, data) in hostile_files().items():
        route = "/api/v1/speech" if field == "audio" else "/api/v1/vision"
        fields = {} if field == "audio" else {"model": vit}

        def send(r: str = route, f: str = field, d: bytes = data, x: Any = fields) -> Any:
            return client.post(r, files={f: ("upload", d)}, data=x)

        rows.append({"case": name, "bytes": len(data), **measure(pid, send)})
    return rows


def indices(client: httpx.Client, pid: int, text: str) -> list[dict[str, Any]]:
    base = {"model": SMOLLM2, "texts": [text], "sequence_index": 0}
    cases = {
        "layer_index 99": {"layer_index": 99},
        "layer_index 99, display_size 64": {"layer_index": 99, "display_size": 64},
        "layer_index 99, max_new_tokens 64": {
            "layer_index": 99,
            "max_new_tokens": 64,
        },
        "head_index 9 (layer 0)": {"layer_index": 0, "head_index": 9},
        "query_index 5000": {"query_index": 5000, "display_size": 64},
        "ablate [[30, 0]]": {"ablate": [[30, 0]], "display_size": 64},
        "target_index 5000, grad_rollout": {"method": "grad_rollout", "target_index": 5000},
    }
    rows = []
    for name, extra in cases.items():
        for route in ("/api/v1/models/attention", "/api/v1/models/attention/layers"):

            def send(r: str = route, e: dict[str, Any] = extra) -> Any:
                return client.post(r, json={**base, **e})

            rows.append({"case": f"{name} -> {route.rsplit('/', 1)[1]}", **measure(pid, send)})
    return rows


def generating(text: str) -> dict[str, Any]:
    """The longest admitted generation: ``text`` (4,032 tokens) + 64 new, pooled to 64."""
    return {
        "model": SMOLLM2,
        "texts": [text],
        "sequence_index": 0,
        "max_new_tokens": 64,
        "display_size": 64,
        "encoding": "base64_float32",
    }


def generation(client: httpx.Client, pid: int, text: str) -> dict[str, Any]:
    body = generating(text)
    idle_before = rss_bytes(pid)
    with sampled(pid) as rss:
        started = time.perf_counter()
        layers, status, start_s, first_s = 0, 0, 0.0, 0.0
        with client.stream("POST", "/api/v1/models/attention/layers", json=body) as response:
            status = response.status_code
            if status == 200:
                for line in response.iter_lines():
                    kind = json.loads(line)["type"]
                    if kind == "start":  # generated and recorded: what the time budget covers
                        start_s = time.perf_counter() - started
                    if kind == "layer":
                        layers += 1
                        first_s = first_s or time.perf_counter() - started
            else:
                response.read()
        seconds = time.perf_counter() - started
    time.sleep(10)
    return {
        "status": status,
        "layers": layers,
        "start_s": start_s,
        "first_layer_s": first_s,
        "s": seconds,
        "growth_mib": (rss["peak"] - rss["before"]) / MiB,
        "idle_before_mib": idle_before / MiB,
        "idle_after_10s_mib": rss_bytes(pid) / MiB,
    }


def time_out(text: str) -> dict[str, Any]:
    env = {"ATTNVIZ_PACKAGED_MODELS": json.dumps([SMOLLM2]), "ATTNVIZ_COMPUTE_TIMEOUT_S": "3"}
    body = generating(text)
    with (
        live_process(env=env, timeout_s=120) as (url, process),
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        wait_for_models(client)
        started = time.perf_counter()
        response = client.post("/api/v1/models/attention", json=body)
        seconds = time.perf_counter() - started
        cpu = cpu_seconds(process.pid)
        time.sleep(4)
        after = cpu_seconds(process.pid) - cpu
        health = client.get("/healthz").status_code
    return {
        "status": response.status_code,
        "field": response.json()["detail"][0]["loc"][-1],
        "s": seconds,
        "cpu_s_in_4s_after": after,
        "healthz": health,
    }


def table(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        print(
            f"  {row['case']:<58} {row.get('bytes', ''):>9} {row['status']} "
            f"{row['field'] or '':<12} {row['s'] * 1000:8.0f} ms {row['growth_mib']:7.1f} MiB"
        )


def wait_for_models(client: httpx.Client) -> None:
    while client.get("/api/v1/models").json()["loading"]:
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-generation", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from attnviz.pretrained import ModelRegistry

    from tests.pretrained.media import save_tiny_vision

    registry = ModelRegistry()
    registry.configure([], packaged=[SMOLLM2])
    registry.load()
    model = registry.get(SMOLLM2)
    text_4000, text_4032 = prompt_of(model, 4000), prompt_of(model, 4032)
    del registry, model
    with tempfile.TemporaryDirectory() as root:
        vit = save_tiny_vision("vit", Path(root) / "tiny-vit", classifier=True)
        env = {
            "ATTNVIZ_PACKAGED_MODELS": json.dumps([SMOLLM2, "whisper-tiny.en"]),
            "ATTNVIZ_MODEL_DIRS": json.dumps([str(vit)]),
        }
        with (
            live_process(env=env, timeout_s=120) as (url, process),
            httpx.Client(base_url=url, timeout=300) as client,
        ):
            wait_for_models(client)
            warm_up(client, "tiny-vit")
            print("1. Hostile uploads: status, field, time, server RSS growth")
            table(uploads(client, process.pid, "tiny-vit"))
            print("2. 4,000 tokens, an index out of range")
            table(indices(client, process.pid, text_4000))
            if not args.skip_generation:
                print("3. SmolLM2, 4,032 + 64 new tokens, streamed grid (display_size 64)")
                print("  ", generation(client, process.pid, text_4032))
    if not args.skip_generation:
        print("4. Stopped by the time budget (3 s): CPU seconds in the 4 s after the 503")
        print("  ", time_out(text_4032))


if __name__ == "__main__":
    main()
