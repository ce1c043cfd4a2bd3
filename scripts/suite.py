"""`make test`'s steps, the independent ones side by side, and how long each took.

    python scripts/suite.py

1. ``make install`` (the virtual environment) beside ``make system-packages`` (Debian's
   Chromium, espeak-ng and the container engine, one ``apt-get update`` for all three);
2. the tests (pytest on four workers, streamed here as they run) beside the linters
   (``make lint``), the documentation site (``make docs``) and the image check
   (``scripts/docker_check.py``), whose build waits mostly on downloads (the tests are told,
   :data:`IMAGE_CHECK_BESIDE`); the tests that start a local Ray (marked ``ray``) run in a
   second pass of their own after the rest, on two workers (:data:`RAY_PASS`);
3. the logs of the other steps, then a table of each step's wall time (s).

The linters and the docs run beside the tests, not before them, at the lowest priority
(:data:`NICEST`): alone, mypy's cold run (about 120 s of one core) left the other core idle for
two minutes; beside the tests they take the time the tests leave idle (the Ray pass leaves
some), and add no load to the tests' waits.

The exit status is 0 when every step passed, else 1 (each failed step is named last).
Environment: ``PYTEST_WORKERS`` (default ``-n 4 --dist loadfile``), ``MAKE``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGE_CHECK_BESIDE = "SUITE_IMAGE_CHECK_BESIDE"
"""Set to 1 for the tests: the real image is built and checked beside them, so the test that
runs the Dockerfile's steps outside a container (5–11 min of one worker, with downloads) is
left to ``make test-slow`` (tests/packaging/test_docker_commands.py)."""
RAY_PASS = ["-m", "ray", "-n", "2", "--dist", "loadfile"]
"""pytest's options for the second pass, the tests marked ``ray``. Ray's own processes
(GCS, raylet, workers, replicas) wait on heartbeats and fixed timeouts: beside three other
workers on two busy cores its tests took ten times as long as alone (1,080 s of the suite's
5,000 worker-seconds, against 115 s for the two modules on an otherwise idle machine) and
ran out Ray's fixed 30 s raylet wait."""
NICEST = ["nice", "-n", "19"]
"""The linters' and the docs' priority beside the tests: the kernel gives them a core only
where no test process wants it (nice 19 weighs 15 against a test process's 1,024)."""
PYTHON = os.environ.get("SUITE_PYTHON", str(ROOT / ".venv" / "bin" / "python"))


@dataclass
class Step:
    """One command, run with its output to a log (or to this terminal), timed."""

    name: str
    command: list[str]
    stream: bool = False
    then: list[str] | None = None
    """A command run after ``command`` has ended (whatever its status), as part of the step."""
    env: dict[str, str] | None = None
    log: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    seconds: float = 0.0
    status: int | None = None

    first_status: int | None = None

    def start(self, logs: Path) -> None:
        self.started = time.perf_counter()
        self.log = None if self.stream else logs / f"{self.name.replace(' ', '-')}.log"
        self._run(self.command)

    def _run(self, command: list[str]) -> None:
        env = {**os.environ, **self.env} if self.env else None
        if self.log is None:
            self.process = subprocess.Popen(command, cwd=ROOT, env=env)
            return
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env
            )

    def poll(self) -> bool:
        """Whether it has ended (its status and time are then set): its status is the first
        non-zero one of ``command`` and ``then``."""
        assert self.process is not None
        if self.status is None:
            status = self.process.poll()
            if status is None:
                return False
            if self.then is not None and self.first_status is None:
                self.first_status = status
                self._run(self.then)
                return False
            self.status = self.first_status or status
            self.seconds = time.perf_counter() - self.started
        return True


def run_beside(steps: list[Step], logs: Path) -> None:
    """Start every step, wait for all of them."""
    for step in steps:
        step.start(logs)
    while not all([step.poll() for step in steps]):
        time.sleep(0.5)


def main() -> int:
    make = os.environ.get("MAKE", "make")
    workers = shlex.split(os.environ.get("PYTEST_WORKERS", "-n 4 --dist loadfile"))
    begun = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="attnviz-suite-") as folder:
        logs = Path(folder)
        setup = [
            Step("make install", [make, "--no-print-directory", "install"]),
            Step("make system-packages", [make, "--no-print-directory", "system-packages"]),
        ]
        run_beside(setup, logs)
        checks: list[Step] = []
        if all(step.status == 0 for step in setup):
            checks = [
                Step(
                    "pytest",
                    [PYTHON, "-m", "pytest", *workers, "-m", "not ray", "--durations=25"],
                    stream=True,
                    env={IMAGE_CHECK_BESIDE: "1"},
                    then=[PYTHON, "-m", "pytest", *RAY_PASS, "--durations=10"],
                ),
                Step("make lint", [*NICEST, make, "--no-print-directory", "lint"]),
                Step("make docs", [*NICEST, make, "--no-print-directory", "docs"]),
                Step("image check", [PYTHON, "scripts/docker_check.py"]),
            ]
            run_beside(checks, logs)
        for step in [*setup, *checks]:
            if step.log is not None and (step.status != 0 or step in checks):
                print(f"=== {step.name} (exit {step.status}) ===", flush=True)
                sys.stdout.write(step.log.read_text(errors="replace"))
        total = time.perf_counter() - begun
    print("=== make test: wall time of each step (s); the steps of a group ran side by side ===")
    for group in (setup, checks):
        for step in group:
            verdict = "passed" if step.status == 0 else f"FAILED (exit {step.status})"
            print(f"  {step.name:<22} {step.seconds:7.0f}  {verdict}")
    print(f"  {'in all':<22} {total:7.0f}")
    failed = [step.name for step in [*setup, *checks] if step.status != 0]
    if not checks:
        failed.append("(the checks did not run: the setup failed)")
    if failed:
        print("make test: failed: " + ", ".join(failed))
        return 1
    print("make test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
