"""AttnViz benchmark: every figure measured side by side in one run, with ratios.

Usage (from the repository root):  make bench   or   .venv/bin/python -m benchmarks.run

For the tutorial size (tutorial 000's batch, d_model 8, 2 heads) and for B=1, H=8,
d_model 512 at L in 16, 128, 512, 1024, 2048, it prints the median end-to-end request
time of AttnViz (real uvicorn on loopback; JSON numbers and base64 float32), the
compute floor (torch.nn.MultiheadAttention, need_weights=True,
average_attn_weights=False, same shapes), the time to copy the weights tensor, the
naive baseline (benchmarks/naive_app.py), response bytes and the ratios. Then
requests/s with 16 concurrent clients at the tutorial size against FastAPI's hello
world, the server's peak memory for the largest allowed request, and the page's draw
times in headless Chromium (when installed).

Timings are medians in milliseconds (ms); machines are shared and noisy, so read the
ratios. Traffic goes to 127.0.0.1 only, bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import torch
from attnviz.attention.tutorials import TUTORIAL_BATCH
from attnviz.devtools import live_process
from torch import nn

REPO_ROOT = Path(__file__).resolve().parents[1]

LENGTHS = (16, 128, 512, 1024, 2048)
D_MODEL, HEADS = 512, 8
TUTORIAL = {"sequences": TUTORIAL_BATCH, "d_model": 8, "num_heads": 2, "mask": "padding_causal"}


def median_ms(run: Callable[[], object], reps: int) -> float:
    """Median wall time of ``run()`` over ``reps`` calls, after one warm-up call."""
    run()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def reps_for(length: int) -> int:
    return 15 if length <= 128 else 7 if length <= 512 else 5 if length <= 1024 else 3


def floor_ms(length: int) -> float:
    """torch.nn.MultiheadAttention with per-head weights: the compute floor."""
    mha = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).eval()
    x = torch.randn(1, length, D_MODEL)
    causal = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)

    def run() -> object:
        with torch.inference_mode():
            return mha(x, x, x, attn_mask=causal, need_weights=True, average_attn_weights=False)

    return median_ms(run, reps_for(length))


def copy_ms(length: int) -> float:
    """Copying the (1, H, L, L) float32 weights tensor once."""
    weights = torch.rand(1, HEADS, length, length)
    return median_ms(weights.clone, reps_for(length))


def varied(body: dict[str, Any], n: int) -> dict[str, Any]:
    """``body`` with its first two tokens set from ``n``: a request the server has not
    answered before (no response-cache hit), with the same layer (module-cache hit)."""
    first = [1 + n % 99, 1 + (n // 99) % 99, *body["sequences"][0][2:]]
    return {**body, "sequences": [first, *body["sequences"][1:]]}


def request_ms(
    client: httpx.Client, url: str, body: dict[str, Any], reps: int
) -> tuple[float, int]:
    """Median end-to-end time of a POST, the whole body read, and the body's bytes.

    Every call sends different tokens, so each one is computed.
    """
    size = 0
    calls = 0

    def run() -> None:
        nonlocal size, calls
        calls += 1
        response = client.post(url, json=varied(body, calls))
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
        size = len(response.content)

    return median_ms(run, reps), size


async def requests_per_s(
    method: str, url: str, body: Any, clients: int, seconds: float, vary: bool = False
) -> float:
    """Completed requests per second with ``clients`` concurrent keep-alive clients.

    With ``vary`` every request has its own tokens, so none is a repeat: each is
    computed (no response-cache hit), with the cached layer.
    """
    done = 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                payload = varied(body, done) if vary else body
                response = await client.request(method, url, json=payload)
                response.raise_for_status()
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return done / (time.perf_counter() - start)


def memory_kib(pid: int, field: str) -> int:
    """VmRSS or VmHWM (peak) of a process, in KiB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def sequence(length: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 100) for _ in range(length)]


def page_timings() -> list[tuple[str, dict[str, float]]]:
    """Draw times the page itself measures, in headless Chromium."""
    from attnviz.devtools import CHROMIUM_ARGS, chromium_path

    executable = chromium_path()
    if executable is None:
        return []
    from playwright.sync_api import sync_playwright

    results = []
    with live_process() as (url, _), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        # Playwright evaluates wait_for_function's string predicates with eval, which the
        # page's Content-Security-Policy forbids (no 'unsafe-eval'); the benchmark lifts
        # the policy for its own context only, as the browser tests' `page` fixture does.
        page = browser.new_page(viewport={"width": 1400, "height": 1000}, bypass_csp=True)
        page.goto(url + "/")
        page.wait_for_function("window.attnviz.timings !== undefined", timeout=30_000)
        results.append(("default preset, page load", page.evaluate("window.attnviz.timings")))
        for length in (1024, 2048):
            page.fill("#sequences", " ".join(map(str, sequence(length))))
            page.fill("#d_model", str(D_MODEL))
            page.fill("#num_heads", str(HEADS))
            page.uncheck("#verify")
            page.evaluate("window.attnviz.timings = undefined")
            page.click("#compute")
            page.wait_for_function("window.attnviz.timings !== undefined", timeout=60_000)
            results.append((f"B=1 H=8 L={length}", page.evaluate("window.attnviz.timings")))
        browser.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--naive-max-len",
        type=int,
        default=1024,
        help="longest L sent to the naive baseline (it takes minutes above)",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="throughput run per app")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    ).stdout.strip()
    print(
        f"AttnViz benchmark at commit {commit}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )

    floors = {length: (floor_ms(length), copy_ms(length)) for length in LENGTHS}
    rows = []
    with (
        live_process() as (attnviz, _),
        live_process("benchmarks.naive_app:app", health_path="/docs") as (naive, _),
        httpx.Client(timeout=600) as client,
    ):
        cases: list[tuple[str, dict[str, Any], float | None, float | None]] = [
            ("tutorial (5x10, d 8, H 2)", TUTORIAL, None, None)
        ]
        for length in LENGTHS:
            body = {
                "sequences": [sequence(length)],
                "d_model": D_MODEL,
                "num_heads": HEADS,
                "mask": "padding_causal",
            }
            cases.append((f"B=1 H=8 d 512 L={length}", body, *floors[length]))
        for name, body, floor, copy in cases:
            length = max(len(s) for s in body["sequences"])
            reps = reps_for(length)
            json_ms, json_bytes = request_ms(client, attnviz + "/api/v1/attention", body, reps)
            compact = {**body, "encoding": "base64_float32"}
            b64_ms, b64_bytes = request_ms(client, attnviz + "/api/v1/attention", compact, reps)
            naive_ms = naive_bytes = None
            if length <= args.naive_max_len:
                naive_reps = 5 if length <= 128 else 1
                naive_ms, naive_bytes = request_ms(client, naive + "/attention", body, naive_reps)
            rows.append(
                (name, json_ms, json_bytes, b64_ms, b64_bytes, naive_ms, naive_bytes, floor, copy)
            )

    print("\n## End to end (median ms) and response bytes\n")
    print(
        "| case | AttnViz JSON | AttnViz base64 f32 | naive | floor (nn.MHA) | copy weights "
        "| naive / AttnViz b64 | AttnViz b64 / floor | bytes JSON | bytes b64 | bytes naive |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, json_ms, json_b, b64_ms, b64_b, naive_ms, naive_b, floor, copy in rows:

        def fmt(x: float | None, unit: str = "") -> str:
            return "n/a" if x is None else f"{x:.1f}{unit}"

        speedup = None if naive_ms is None else naive_ms / b64_ms
        over_floor = None if floor is None else b64_ms / floor
        print(
            f"| {name} | {json_ms:.1f} | {b64_ms:.1f} | {fmt(naive_ms)} | {fmt(floor)} | "
            f"{fmt(copy)} | {fmt(speedup, 'x')} | {fmt(over_floor, 'x')} | {json_b:,} | "
            f"{b64_b:,} | {'n/a' if naive_b is None else f'{naive_b:,}'} |"
        )

    print(f"\n## Throughput, 16 concurrent clients, {args.seconds:.0f} s each\n")
    with live_process() as (attnviz, _):
        attnviz_rps = asyncio.run(
            requests_per_s("POST", attnviz + "/api/v1/attention", TUTORIAL, 16, args.seconds)
        )
        distinct_rps = asyncio.run(
            requests_per_s(
                "POST", attnviz + "/api/v1/attention", TUTORIAL, 16, args.seconds, vary=True
            )
        )
    with live_process("benchmarks.hello_app:app", health_path="/") as (hello, _):
        hello_rps = asyncio.run(requests_per_s("GET", hello + "/", None, 16, args.seconds))
    print("| app | requests/s |\n|---|---|")
    print(f"| FastAPI hello world | {hello_rps:.0f} |")
    print(
        f"| AttnViz, the tutorial request repeated | {attnviz_rps:.0f} "
        f"({attnviz_rps / hello_rps:.0%} of hello world) |"
    )
    print(
        f"| AttnViz, tutorial size, new tokens each request (computed) | {distinct_rps:.0f} "
        f"({distinct_rps / hello_rps:.0%} of hello world) |"
    )

    print("\n## Peak server memory for the largest allowed request (B=1, H=8, L=2048)\n")
    weights_mib = HEADS * 2048 * 2048 * 4 / 2**20
    print(f"weights tensor: {weights_mib:.0f} MiB float32\n")
    print(
        "| encoding | RSS before (MiB) | peak (MiB) | peak - before | / weights |\n"
        "|---|---|---|---|---|"
    )
    largest = {
        "sequences": [sequence(2048)],
        "d_model": D_MODEL,
        "num_heads": HEADS,
        "mask": "padding_causal",
    }
    for encoding in ("base64_float32", "json"):
        with live_process() as (attnviz, process), httpx.Client(timeout=600) as client:
            client.post(attnviz + "/api/v1/attention", json=TUTORIAL).raise_for_status()
            before = memory_kib(process.pid, "VmRSS") / 1024
            response = client.post(
                attnviz + "/api/v1/attention", json={**largest, "encoding": encoding}
            )
            response.raise_for_status()
            peak = memory_kib(process.pid, "VmHWM") / 1024
        print(
            f"| {encoding} | {before:.0f} | {peak:.0f} | {peak - before:.0f} | "
            f"{(peak - before) / weights_mib:.2f}x |"
        )

    timings = page_timings()
    if timings:
        print("\n## Page, headless Chromium (ms, measured by the page)\n")
        print(
            "| case | request + decode | draw after response | since script start "
            "| since navigation |"
        )
        print("|---|---|---|---|---|")
        for name, t in timings:
            print(
                f"| {name} | {t['responseMs']:.0f} | {t['drawMs']:.0f} | "
                f"{t['sinceScriptMs']:.0f} | {t['sinceLoadMs']:.0f} |"
            )


if __name__ == "__main__":
    main()
