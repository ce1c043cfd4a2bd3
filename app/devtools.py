"""Helpers for the tests, benchmarks and scripts: real servers and Debian's Chromium.

Nothing here is used by the server itself. :func:`live_process` starts a real uvicorn
on a free loopback port; :func:`chromium_path` and :data:`CHROMIUM_ARGS` launch the
system's Chromium through Playwright (never a downloaded browser).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM_CANDIDATES = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
"""Where Chromium is looked for, in order, after ``ATTNVIZ_CHROMIUM``: Debian's
``chromium-headless-shell`` first, Chromium's headless-only build (the one Playwright itself
runs headless), then the whole browser, ``chromium``. Both draw the same pages; the headless
shell's own processes take about a quarter less CPU doing it (the browser tests side by side
on 2 cores: Chromium 461 CPU-s against 601, the tier 542 s against 610; docs/development.md)."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Headless, sandbox-less, no GPU, and no traffic of its own (updates, sync, QUIC)."""


def chromium_path() -> str | None:
    """The Chromium executable, or None when it is not installed.

    ``ATTNVIZ_CHROMIUM`` when it names a file, else the first of
    :data:`CHROMIUM_CANDIDATES` that exists, else ``chromium-headless-shell`` or ``chromium``
    on the PATH (``make browser`` installs both from Debian).
    """
    for path in (os.environ.get("ATTNVIZ_CHROMIUM", ""), *CHROMIUM_CANDIDATES):
        if path and Path(path).is_file():
            return path
    return shutil.which("chromium-headless-shell") or shutil.which("chromium")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def live_process(
    app: str | None = None,
    health_path: str = "/healthz",
    timeout_s: float = 300.0,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start a server on a free loopback port; yield (base URL, process).

    Args:
        app: None runs AttnViz's documented command, ``python -m attnviz``; else an ASGI
            app path ("module:attribute") run by ``python -m uvicorn``.
        health_path: polled until it answers 200: the event waited on (its process
            exiting ends the wait at once, with its output).
        timeout_s: a bound on a hung start, not a guess at how long a start takes: on a
            busy 2-core machine a server that imports torch and transformers took over
            30 s to answer.
        env: extra environment variables.
        log_path: where the server's output goes (appended; its access log, one JSON line
            per request, for a failed test's report); None: a temporary file.

    The server runs in the current working directory.

    The server's output goes to a file (a pipe nobody reads would block it), shown if
    the server fails to start.
    """
    port = free_port()
    full_env = {**os.environ, "ATTNVIZ_HOST": "127.0.0.1", "ATTNVIZ_PORT": str(port), **(env or {})}
    command = (
        [sys.executable, "-m", "attnviz"]
        if app is None
        else [
            sys.executable,
            "-m",
            "uvicorn",
            app,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
    )
    base_url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() if log_path is None else open(log_path, "a+b") as log:
        process = subprocess.Popen(command, env=full_env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    output = log.read().decode(errors="replace")
                    raise RuntimeError(f"the server exited with {process.returncode}:\n{output}")
                try:
                    with urllib.request.urlopen(base_url + health_path, timeout=1) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the server did not answer {health_path} in {timeout_s} s")
                time.sleep(0.1)
            yield base_url, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def live_server(timeout_s: float = 300.0) -> Iterator[str]:
    """Start ``python -m attnviz`` (real uvicorn) on a free loopback port; yield its base URL."""
    with live_process(timeout_s=timeout_s) as (url, _):
        yield url
