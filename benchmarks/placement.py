"""Loading benchmark: SmolLM2's server memory in float32, in bfloat16, and offloaded to disk.

Usage (from the repository root):  .venv/bin/python -m benchmarks.placement

Each configuration starts a fresh ``python -m attnviz`` (loopback) serving SmolLM2 only and
waits until it has loaded (the GGUF file's cache folder in that dtype already filled by a
first start), then reads the process's memory from /proc: ``VmHWM``, the peak resident memory
while loading (the warm-up input included), and ``VmRSS``, what the loaded server holds. The
bare server (no model) is the base. Figures, in MiB:

* load peak above the bare server, and its ratio to the parameter bytes in the dtype
  (target, issue 30: at most 1.3x);
* held above the bare server; what bfloat16 saves against float32, as a share of the
  bfloat16 parameter bytes (target: at least 0.75x);
* with ``ATTNVIZ_MAX_MEMORY={"cpu": "200MiB"}`` and an offload folder: the layers per
  device /api/v1/models reports, and what the server holds.
"""

from __future__ import annotations

import json
import tempfile
import time
from typing import Any

import httpx2 as httpx
from attnviz.devtools import live_process

from benchmarks.decoder import NAME, peak_rss_bytes

MiB = 2**20


def served(env: dict[str, str]) -> dict[str, Any]:
    """Start a server with ``env``, wait for its models; its memory and /api/v1/models."""
    with live_process(env=env, timeout_s=120) as (url, process):
        with httpx.Client(base_url=url, timeout=60) as client:
            while True:
                listing = client.get("/api/v1/models").json()
                if not listing["loading"]:
                    break
                time.sleep(0.5)
        time.sleep(1.0)
        return {
            "peak": peak_rss_bytes(process.pid),
            "held": peak_rss_bytes(process.pid, "VmRSS"),
            "models": listing["models"],
        }


def main() -> None:
    base_env = {"ATTNVIZ_PACKAGED_MODELS": json.dumps([NAME])}
    bare = served({"ATTNVIZ_PACKAGED_MODELS": "[]"})
    print(f"bare server: {bare['held'] / MiB:.0f} MiB resident\n")
    print("| dtype | parameter bytes | load peak above bare (x parameters) | held above bare |")
    print("|---|---|---|---|")
    held = {}
    parameters = {}
    for dtype in ("float32", "bfloat16"):
        served({**base_env, "ATTNVIZ_DTYPE": dtype})  # fills this dtype's GGUF cache if empty
        got = served({**base_env, "ATTNVIZ_DTYPE": dtype})
        (info,) = got["models"]
        assert info["state"] == "ready" and info["dtype"] == dtype, info
        parameters[dtype] = info["parameter_bytes"]
        peak = got["peak"] - bare["held"]
        held[dtype] = got["held"] - bare["held"]
        print(
            f"| {dtype} | {parameters[dtype] / MiB:.0f} MiB | {peak / MiB:.0f} MiB "
            f"({peak / parameters[dtype]:.2f}x) | {held[dtype] / MiB:.0f} MiB |"
        )
    saved = held["float32"] - held["bfloat16"]
    print(
        f"\nbfloat16 holds {saved / MiB:.0f} MiB less than float32: "
        f"{saved / parameters['bfloat16']:.2f}x the bfloat16 parameter bytes"
    )
    with tempfile.TemporaryDirectory(prefix="attnviz-offload-") as offload:
        got = served(
            {
                **base_env,
                "ATTNVIZ_MAX_MEMORY": '{"cpu": "200MiB"}',
                "ATTNVIZ_OFFLOAD_DIR": offload,
            }
        )
    (info,) = got["models"]
    print(
        f"\nmax_memory cpu 200MiB + offload folder: layers per device "
        f"{info['layers_per_device']}, held above bare {(got['held'] - bare['held']) / MiB:.0f} "
        f"MiB, load peak above bare {(got['peak'] - bare['held']) / MiB:.0f} MiB"
    )


if __name__ == "__main__":
    main()
