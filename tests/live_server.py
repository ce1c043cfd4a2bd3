"""A real uvicorn server (``python -m app``) on a free loopback port, for tests and scripts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def live_server(timeout_s: float = 30.0) -> Iterator[str]:
    """Start ``python -m app`` (real uvicorn) on a free loopback port; yield its base URL."""
    port = free_port()
    env = {**os.environ, "ATTNVIZ_HOST": "127.0.0.1", "ATTNVIZ_PORT": str(port)}
    process = subprocess.Popen(
        [sys.executable, "-m", "app"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                output = process.stdout.read().decode() if process.stdout else ""
                raise RuntimeError(f"the server exited with {process.returncode}:\n{output}")
            try:
                with urllib.request.urlopen(f"{base_url}/healthz", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not answer /healthz in {timeout_s} s")
            time.sleep(0.1)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
