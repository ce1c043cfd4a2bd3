"""The ``attnviz`` command: serve, compute, export, models, atlas.

    attnviz serve [--host H] [--port P] [--workers N] [--reload]
    attnviz compute (--json FILE | --sequence TEXT ...) [options] [--output FILE]
    attnviz export  (--json FILE | --sequence TEXT ...) [options] --output FILE
    attnviz export  --model NAME --text TEXT [--layer L [--head H]] [--method M] --output FILE
    attnviz models  (load the pretrained models the server would offer; list them)
    attnviz atlas   MODEL --corpus FILE --out DIR [--shards N] [--top-k K] [--max-tokens T]
    attnviz --version

``compute`` and ``export`` take the same inputs as POST /api/v1/attention, from flags
or from a JSON file of that request (flags then override it). A ``--sequence`` whose
tokens are all integers is token ids; otherwise it is words (as on the page).
``export --model`` runs a pretrained model on ``--text`` instead (:func:`attnviz.show`).
The output's suffix chooses the format: .html (standalone, offline), .png, .svg or .pdf.
``atlas`` scores every head of a text model over a corpus file (.txt, a passage a line,
or .jsonl with a ``text`` field), keeping each head's best passages
(:mod:`attnviz.pretrained.atlas.shards`).
"""

from __future__ import annotations

import argparse
import sys

from . import atlas, compute, export, models, serve
from .common import (
    DefaultsShown,
    build_request,
    check_model_names,
    plain_text,
    usage_error,
)

__all__ = [
    "build_request",
    "check_model_names",
    "main",
    "parser",
    "plain_text",
    "usage_error",
]

INTERRUPTED = 130
"""The exit status after Ctrl-C: 128 + SIGINT, as a shell reports it."""


class _CommandsShown(DefaultsShown, argparse.RawDescriptionHelpFormatter):
    """The main help: the usage lines of the description kept as written."""


def parser() -> argparse.ArgumentParser:
    """The argument parser of the ``attnviz`` command: one module per command adds its own."""
    from .. import __version__

    main_parser = argparse.ArgumentParser(
        prog="attnviz",
        description=plain_text(__doc__ or ""),
        formatter_class=_CommandsShown,
        epilog="attnviz COMMAND --help shows one command's options.\n"
        "Settings come from ATTNVIZ_* environment variables (docs/deploy.md).",
    )
    main_parser.add_argument("--version", action="version", version=f"attnviz {__version__}")
    commands = main_parser.add_subparsers(dest="command", required=True)
    for command in (serve, compute, export, models, atlas):
        command.add_parser(commands)
    for action in commands._choices_actions:  # each command's --help opens with its summary
        one = commands.choices[action.dest]
        one.description = one.description or f"attnviz {action.dest}: {action.help}."
    return main_parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``attnviz`` console script.

    Ctrl-C stops any command with one line on stderr and exit status 130
    (:data:`INTERRUPTED`), never a traceback.
    """
    args = parser().parse_args(argv)
    try:
        args.run(args)
    except KeyboardInterrupt:
        print(f"\nattnviz {args.command}: stopped (Ctrl-C)", file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None
