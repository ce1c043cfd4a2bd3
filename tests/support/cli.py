"""Running the attnviz command in the test's own process (help, refused arguments)."""

from __future__ import annotations

import contextlib
import io
import signal
import subprocess
import sys


def attnviz_here(*args: str) -> subprocess.CompletedProcess[str]:
    """``attnviz ARGS`` run by :func:`attnviz.cli.main` in this process: its exit code (a
    SystemExit's message is printed to stderr with code 1, as Python does), stdout, stderr."""
    from attnviz.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            main(list(args))
        except SystemExit as exit_:
            if isinstance(exit_.code, str):
                print(exit_.code, file=sys.stderr)
                code = 1
            else:
                code = exit_.code or 0
    return subprocess.CompletedProcess(list(args), code, stdout.getvalue(), stderr.getvalue())


def ctrl_c_as_on_a_terminal() -> None:
    """``preexec_fn`` of a command a test stops with SIGINT: its default action back, as in a
    terminal's foreground job. A job that a non-interactive shell started in the background
    (``cmd &``, as CI runners and ``nohup`` scripts may) inherits SIGINT ignored, and Python
    then installs no KeyboardInterrupt for it: the signal would be lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
