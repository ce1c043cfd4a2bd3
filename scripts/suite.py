"""`make test`'s steps, the independent ones side by side, and how long each took.

    python scripts/suite.py

1. ``make install`` (the virtual environment) beside ``make system-packages`` (Debian's
   Chromium, espeak-ng and the container engine, one ``apt-get update`` for all three);
2. the image check (``scripts/docker_check.py``, standard library only) as soon as the system
   packages are in, beside the rest of ``make install``: the install waits mostly on
   downloads and left one core about half idle for its first 90 s (``vmstat``, a fresh clone);
3. once both are done, the tests (pytest on four workers, streamed here as they run) beside
   the linters (``make lint``) and the documentation site (``make docs``), and the image
   check still running (the tests are told, :data:`IMAGE_CHECK_BESIDE`); the tests that
   start a local Ray (marked ``ray``) run in a second pass of their own after the rest, on
   two workers (:data:`RAY_PASS`);
4. the logs of the other steps, then a table of each step's wall time (s) and start.

A step whose needs failed does not start, and is named as not run.

The linters and the docs run beside the tests, not before them, at the lowest priority
(:data:`NICEST`): alone, mypy's cold run (about 120 s of one core) left the other core idle for
two minutes; beside the tests they take the time the tests leave idle (the Ray pass leaves
some), and add no load to the tests' waits.

The exit status is 0 when every step passed, else 1 (each failed step is named last).
Environment: ``PYTEST_WORKERS`` (default ``-n 4 --dist loadfile``), ``MAKE``, ``SUITE_PYTHON``
(the environment's Python), ``SUITE_SYSTEM_PYTHON`` (the image check's; this one's).
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
RAY_FILES = ("tests/server/test_ray_serve.py", "tests/pretrained/test_atlas_ray.py")
"""The files of the tests marked ``ray``: the second pass collects these alone (each of its
workers would otherwise collect all 2,000 tests, 19 CPU-s, to run 28). tests/conftest.py
refuses a test marked ``ray`` in a file not named here, which this pass would leave out."""
RAY_PASS = ["-m", "ray", "-n", "2", "--dist", "loadfile", *RAY_FILES]
"""pytest's options for the second pass, the tests marked ``ray``. Ray's own processes
(GCS, raylet, workers, replicas) wait on heartbeats and fixed timeouts: beside three other
workers on two busy cores its tests took ten times as long as alone (1,080 s of the suite's
5,000 worker-seconds, against 115 s for the two modules on an otherwise idle machine) and
ran out Ray's fixed 30 s raylet wait."""
NICEST = ["nice", "-n", "19"]
"""The linters' and the docs' priority beside the tests: the kernel gives them a core only
where no test process wants it (nice 19 weighs 15 against a test process's 1,024)."""
PYTHON = os.environ.get("SUITE_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
SYSTEM_PYTHON = os.environ.get("SUITE_SYSTEM_PYTHON", sys.executable)
"""The image check's Python: it is standard library only, so it runs without the virtual
environment, beside ``make install`` (which keeps one core about half idle on downloads)."""
BEGUN = time.perf_counter()


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
    needs: tuple[Step, ...] = ()
    """The steps that must have passed before this one starts."""
    offset: float = 0.0
    """When it started, in seconds from the suite's start."""

    def start(self, logs: Path) -> None:
        self.started = time.perf_counter()
        self.offset = self.started - BEGUN
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


def run_when_ready(steps: list[Step], logs: Path) -> None:
    """Start each step once every step it ``needs`` has passed; return when every started
    step has ended and no other can start (a step whose need failed never starts)."""
    while True:
        for step in steps:
            if step.process is not None:
                step.poll()
        for step in steps:
            if step.process is None and all(need.status == 0 for need in step.needs):
                step.start(logs)
        if all(step.process is None or step.status is not None for step in steps):
            return
        time.sleep(0.5)


def main() -> int:
    make = os.environ.get("MAKE", "make")
    workers = shlex.split(os.environ.get("PYTEST_WORKERS", "-n 4 --dist loadfile"))
    with tempfile.TemporaryDirectory(prefix="attnviz-suite-") as folder:
        logs = Path(folder)
        install = Step("make install", [make, "--no-print-directory", "install"])
        packages = Step("make system-packages", [make, "--no-print-directory", "system-packages"])
        setup = [install, packages]
        both = (install, packages)
        checks = [
            Step(
                "pytest",
                [PYTHON, "-m", "pytest", *workers, "-m", "not ray", "--durations=25"],
                stream=True,
                env={IMAGE_CHECK_BESIDE: "1"},
                then=[PYTHON, "-m", "pytest", *RAY_PASS, "--durations=10"],
                needs=both,
            ),
            Step("make lint", [*NICEST, make, "--no-print-directory", "lint"], needs=both),
            Step("make docs", [*NICEST, make, "--no-print-directory", "docs"], needs=both),
            Step("image check", [SYSTEM_PYTHON, "scripts/docker_check.py"], needs=(packages,)),
        ]
        run_when_ready([*setup, *checks], logs)
        for step in [*setup, *checks]:
            if (
                step.log is not None
                and step.process is not None
                and (step.status != 0 or step in checks)
            ):
                print(f"=== {step.name} (exit {step.status}) ===", flush=True)
                sys.stdout.write(step.log.read_text(errors="replace"))
        total = time.perf_counter() - BEGUN
    print(
        "=== make test: wall time of each step (s), and when it started; the image check "
        "starts once the system packages are in, the rest once the environment is too ==="
    )
    for step in [*setup, *checks]:
        if step.process is None:
            print(f"  {step.name:<22} {'':>7}  not run: a step it needs failed")
            continue
        verdict = "passed" if step.status == 0 else f"FAILED (exit {step.status})"
        print(f"  {step.name:<22} {step.seconds:7.0f}  {verdict} (from {step.offset:.0f} s)")
    print(f"  {'in all':<22} {total:7.0f}")
    failed = [step.name for step in [*setup, *checks] if step.status not in (0, None)]
    skipped = [step.name for step in checks if step.process is None]
    if skipped:
        failed.append(f"(not run, a step they need failed: {', '.join(skipped)})")
    if failed:
        print("make test: failed: " + ", ".join(failed))
        return 1
    print("make test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
