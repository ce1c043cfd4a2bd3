"""Run a command while other processes keep cores busy: the suite on a loaded machine.

    python scripts/busy.py 2 -- make test

starts two processes that spin (each takes a whole core), runs the command, stops them,
and exits with the command's status. `make test-busy` runs the whole suite this way
(docs/development.md): every test waits on the event it needs, never on the clock, so it
passes on a machine whose cores something else keeps busy.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys


def spin() -> None:
    """Keep one core busy until killed."""
    while True:
        pass


def main(argv: list[str]) -> int:
    """``busy.py N -- COMMAND...``: COMMAND's exit status."""
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: busy.py N -- COMMAND...", file=sys.stderr)
        return 2
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(int(argv[0]))]
    for process in spinners:
        process.start()
    try:
        return subprocess.call(argv[2:])
    finally:
        for process in spinners:
            process.kill()
            process.join()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
