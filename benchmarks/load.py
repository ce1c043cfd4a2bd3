"""Load test: 32 concurrent clients for 60 s against a real uvicorn server on loopback.

Usage (from the repository root):  make load   or   .venv/bin/python -m benchmarks.load

The mix per client, drawn at random: 70% small requests (the tutorial batch with new
tokens: computed), 10% the default preset repeated, 12% L=512 H=8 for display
(base64, pooled to 128), 3% the largest allowed request (L=2048, H=8, base64), and
5% requests the limits refuse (d_model over the limit, 10 000 tokens, malformed
JSON), which must get a 4xx. It prints requests served, errors (anything else:
5xx, timeouts, unexpected statuses), p50/p95/p99 latency per kind, and the server's
peak RSS, which must stay under PEAK_RSS_BOUND_MIB. Traffic goes to 127.0.0.1 only,
bounded in time and count.

A second case, on a fresh server, sends 30,000 distinct tiny requests (a new seed
each, so each builds a seeded layer and a response that the caches keep) and prints
the server's RSS before and after: its growth beyond the configured cache budgets
(ATTNVIZ_MODEL_CACHE_BYTES + ATTNVIZ_RESPONSE_CACHE_BYTES, set small here so that
the caches fill and evict) must stay under GROWTH_BOUND_MIB.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections import defaultdict
from typing import Any

import httpx2 as httpx
from attnviz.attention.tutorials import TUTORIAL_BATCH
from attnviz.devtools import live_process

from benchmarks.run import memory_kib

PEAK_RSS_BOUND_MIB = 2048
"""The documented bound on the server's peak resident memory under this load."""
MAX_REQUESTS = 100_000
GROWTH_BOUND_MIB = 64
"""The most the server may grow beyond its cache budgets over the distinct-request case."""


def draw(rng: random.Random) -> tuple[str, dict[str, Any] | bytes, set[int]]:
    """One request: (kind, JSON body or raw bytes, the statuses that count as success)."""
    roll = rng.random()
    if roll < 0.70:
        batch = [[rng.randrange(1, 100) for _ in seq] for seq in TUTORIAL_BATCH]
        return "small", {"sequences": batch, "mask": "padding_causal"}, {200}
    if roll < 0.80:
        return "repeated", {"sequences": TUTORIAL_BATCH, "mask": "padding_causal"}, {200}
    if roll < 0.92:
        tokens = [rng.randrange(1, 100) for _ in range(512)]
        body = {
            "sequences": [tokens],
            "d_model": 512,
            "num_heads": 8,
            "display_size": 128,
            "encoding": "base64_float32",
        }
        return "L512", body, {200}
    if roll < 0.95:
        tokens = [rng.randrange(1, 100) for _ in range(2048)]
        body = {"sequences": [tokens], "d_model": 512, "num_heads": 8, "encoding": "base64_float32"}
        return "L2048", body, {200}
    refused: list[tuple[dict[str, Any] | bytes, set[int]]] = [
        ({"sequences": [[1]], "d_model": 4096}, {413, 422}),
        ({"sequences": [" ".join("x" * 10_000)]}, {413, 422}),
        (b'{"sequences": [[1, 2]', {422}),
    ]
    body, ok = rng.choice(refused)
    return "refused", body, ok


async def client_loop(
    client: httpx.AsyncClient, url: str, deadline: float, seed: int, stats: dict[str, Any]
) -> None:
    rng = random.Random(seed)
    while time.perf_counter() < deadline and stats["sent"] < MAX_REQUESTS:
        kind, body, ok = draw(rng)
        stats["sent"] += 1
        start = time.perf_counter()
        try:
            if isinstance(body, bytes):
                response = await client.post(
                    url, content=body, headers={"content-type": "application/json"}
                )
            else:
                response = await client.post(url, json=body)
            await response.aread()
            status = response.status_code
        except httpx.HTTPError as error:
            status = f"{type(error).__name__}"
        stats["latency"][kind].append((time.perf_counter() - start) * 1000)
        if status in ok:
            stats["served"][kind] += 1
        else:
            stats["errors"][f"{kind}: {status}"] += 1


async def run(url: str, clients: int, seconds: float, pid: int) -> dict[str, Any]:
    stats: dict[str, Any] = {
        "sent": 0,
        "served": defaultdict(int),
        "errors": defaultdict(int),
        "latency": defaultdict(list),
        "rss_samples": [],
    }
    deadline = time.perf_counter() + seconds

    async def sample_rss() -> None:
        while time.perf_counter() < deadline:
            stats["rss_samples"].append(memory_kib(pid, "VmRSS") / 1024)
            await asyncio.sleep(0.5)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        await asyncio.gather(
            sample_rss(),
            *(client_loop(client, url, deadline, seed, stats) for seed in range(clients)),
        )
    return stats


def percentile(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


async def distinct_tiny(url: str, count: int, clients: int) -> int:
    """Send ``count`` tiny requests, each with a seed of its own; return how many got 200."""
    seeds = iter(range(count))
    ok = 0

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal ok
        for seed in seeds:
            body = {"sequences": [[1, 2, 3]], "seed": seed, "d_model": 8, "num_heads": 2}
            response = await client.post(url, json=body)
            ok += response.status_code == 200

    async with httpx.AsyncClient(timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(clients)))
    return ok


def growth_case(count: int, model_cache_mib: int, response_cache_mib: int) -> bool:
    """The distinct-request case: RSS before and after, growth against the budgets."""
    env = {
        "ATTNVIZ_MODEL_CACHE_BYTES": str(model_cache_mib * 2**20),
        "ATTNVIZ_RESPONSE_CACHE_BYTES": str(response_cache_mib * 2**20),
        "ATTNVIZ_ACCESS_LOG": "false",
    }
    with live_process(env=env) as (url, process):
        endpoint = url + "/api/v1/attention"
        asyncio.run(distinct_tiny(endpoint, 200, 4))  # warm: first allocations, pools
        before = memory_kib(process.pid, "VmRSS") / 1024
        started = time.perf_counter()
        ok = asyncio.run(distinct_tiny(endpoint, count, 8))
        elapsed = time.perf_counter() - started
        after = memory_kib(process.pid, "VmRSS") / 1024
    budgets = model_cache_mib + response_cache_mib
    beyond = after - before - budgets
    print(
        f"\ndistinct tiny requests: {count} sent in {elapsed:.0f} s, {ok} answered 200; "
        f"server RSS {before:.0f} MiB before, {after:.0f} MiB after (+{after - before:.0f} "
        f"MiB); cache budgets {budgets} MiB (model {model_cache_mib}, response "
        f"{response_cache_mib}); growth beyond them {beyond:.0f} MiB "
        f"(bound {GROWTH_BOUND_MIB} MiB)"
    )
    return ok == count and beyond < GROWTH_BOUND_MIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--distinct", type=int, default=30_000, help="0 skips the case")
    parser.add_argument("--model-cache-mib", type=int, default=64)
    parser.add_argument("--response-cache-mib", type=int, default=16)
    parser.add_argument("--skip-mix", action="store_true", help="run the distinct case only")
    args = parser.parse_args()
    grew_within = True
    if args.distinct:
        grew_within = growth_case(args.distinct, args.model_cache_mib, args.response_cache_mib)
    if args.skip_mix:
        if not grew_within:
            raise SystemExit("FAILED: the server grew beyond its cache budgets")
        return
    with live_process() as (url, process):
        started = time.perf_counter()
        stats = asyncio.run(run(url + "/api/v1/attention", args.clients, args.seconds, process.pid))
        elapsed = time.perf_counter() - started
        peak_mib = memory_kib(process.pid, "VmHWM") / 1024
        alive = process.poll() is None
    served = sum(stats["served"].values())
    errors = sum(stats["errors"].values())
    print(
        f"{args.clients} clients, {elapsed:.0f} s: {stats['sent']} requests sent, "
        f"{served} served as expected ({served / elapsed:.0f}/s), {errors} errors"
    )
    for what, count in sorted(stats["errors"].items()):
        print(f"  error {what}: {count}")
    print("\n| kind | served | p50 ms | p95 ms | p99 ms |\n|---|---|---|---|---|")
    for kind in ("small", "repeated", "L512", "L2048", "refused"):
        values = stats["latency"].get(kind, [])
        if values:
            print(
                f"| {kind} | {stats['served'][kind]} | {percentile(values, 50):.0f} | "
                f"{percentile(values, 95):.0f} | {percentile(values, 99):.0f} |"
            )
    print(
        f"\nserver peak RSS {peak_mib:.0f} MiB (bound {PEAK_RSS_BOUND_MIB} MiB); "
        f"server alive after the run: {alive}"
    )
    if errors or peak_mib > PEAK_RSS_BOUND_MIB or not alive or not grew_within:
        raise SystemExit(
            "FAILED: errors, memory over the bound, growth beyond the cache budgets, "
            "or the server died"
        )


if __name__ == "__main__":
    main()
