"""What the ``attnviz`` commands share: help formatting, usage errors, request inputs.

:func:`usage_error` (exit 2, as argparse), :func:`invalid_input` (input the API would
refuse, naming the field), :func:`build_request` (the toy engine's request from flags or
a ``--json`` file) and :func:`check_model_names` (a name no model can have, refused before
anything loads).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from ..attention.engine import DEVICE_NAMES
from ..attention.masks import MASK_NAMES

__all__ = [
    "DefaultsShown",
    "build_request",
    "check_model_names",
    "input_arguments",
    "invalid_input",
    "name_models",
    "plain_text",
    "usage_error",
    "write_output",
]


def plain_text(text: str) -> str:
    """A docstring for a terminal: its reStructuredText markup taken out.

    ``code`` becomes code, :func:`attnviz.show` becomes attnviz.show.
    """
    import re

    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return re.sub(r"``([^`]+)``", r"\1", text)


class DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in --help: argparse's, unless its help already says one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default:" in text:
            return text
        return super()._get_help_string(action) or text


def usage_error(message: str) -> NoReturn:
    """Say ``attnviz: message`` on stderr and exit 2, as argparse does for a usage error."""
    print(f"attnviz: {message}", file=sys.stderr)
    raise SystemExit(2)


def invalid_input(problems: list[tuple[Sequence[Any], str]]) -> SystemExit:
    """The exit for refused input: ``attnviz: invalid input: field: message; ...``."""
    text = "; ".join(f"{'.'.join(str(part) for part in loc)}: {msg}" for loc, msg in problems)
    return SystemExit(f"attnviz: invalid input: {text}")


def write_output(data: bytes | str, output: Path | None) -> None:
    """Write ``data`` to ``output``, or to stdout where it is None."""
    if output is None:
        if isinstance(data, str):
            sys.stdout.write(data)
        else:
            sys.stdout.buffer.write(data)
        return
    if isinstance(data, str):
        output.write_text(data, encoding="utf-8")
    else:
        output.write_bytes(data)


def input_arguments(parser: argparse.ArgumentParser) -> None:
    """The toy engine's inputs, as in POST /api/v1/attention (``compute``, ``export``)."""
    parser.add_argument(
        "--json", type=Path, help="a request body as in POST /api/v1/attention (default: none)"
    )
    parser.add_argument(
        "--sequence", action="append", default=[], help="one sequence (repeat the flag for a batch)"
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        help="one target sequence, for cross attention (repeatable); with export --model, "
        "an encoder-decoder's decoder text",
    )
    from ..server.schemas import AttentionRequest

    fields = AttentionRequest.model_fields
    for flag, kind, choices, what in (
        ("--d-model", int, None, "model width d_model"),
        ("--num-heads", int, None, "heads"),
        ("--seed", int, None, "the weights' seed"),
        ("--mask", str, MASK_NAMES, "mask"),
        ("--pad-id", int, None, "padding id"),
        ("--vocab-size", int, None, "vocabulary size"),
        ("--device", str, DEVICE_NAMES, "where to compute"),
    ):
        name = flag[2:].replace("-", "_")
        # Left out, the field is the request's (--json) or the API's default, shown here.
        parser.add_argument(
            flag,
            type=kind,
            choices=choices,
            default=argparse.SUPPRESS,
            help=f"{what} (default: {fields[name].default!s}, or --json's)",
        )
    parser.add_argument(
        "--output", "-o", type=Path, help="write here instead of stdout (default: stdout)"
    )


def _parse_sequence(text: str) -> list[int] | str:
    tokens = text.split()
    if tokens and all(t.lstrip("-").isdigit() for t in tokens):
        return [int(t) for t in tokens]
    return text


def build_request(args: argparse.Namespace) -> Any:
    """The AttentionRequest the flags (and --json file) describe.

    Raises:
        SystemExit: with a message naming the field, for input the API would refuse.
    """
    from ..server.schemas import AttentionRequest

    body: dict[str, Any] = {}
    if args.json is not None:
        body = json.loads(args.json.read_text(encoding="utf-8"))
    if args.sequence:
        body["sequences"] = [_parse_sequence(s) for s in args.sequence]
    if args.target:
        body["targets"] = [_parse_sequence(s) for s in args.target]
    for name in ("d_model", "num_heads", "seed", "mask", "pad_id", "vocab_size", "device"):
        value = getattr(args, name, None)
        if value is not None:
            body[name] = value
    try:
        return AttentionRequest.model_validate(body)
    except ValidationError as error:
        raise invalid_input([(e["loc"], e["msg"]) for e in error.errors()]) from None


def check_model_names(names: list[str], where: str) -> None:
    """Refuse at once (:func:`usage_error`, exit 2) a name no model can have.

    A name that is neither a packaged model, an existing path nor a Hugging Face id
    (:func:`attnviz.pretrained.registry.check_model_name`): checked before anything is
    loaded or started, so ``serve --model org/name/../../x`` stops in a moment with the
    rule, not after the server's start-up. ``where``: the option or setting named.
    """
    if not names:
        return
    from ..pretrained.model import ModelFormatError
    from ..pretrained.registry import check_model_name

    for name in names:
        try:
            check_model_name(name)
        except ModelFormatError as error:
            usage_error(f"{where}: {str(error).removeprefix('ATTNVIZ_MODELS: ')}")


def name_models(models: list[str] | None) -> None:
    """Add ``--model`` values to ATTNVIZ_MODELS, ahead of what it lists (every worker reads it).

    Every name, given or listed, is checked first (:func:`check_model_names`).

    Raises:
        SystemExit: ATTNVIZ_MODELS is not a JSON list of strings, or a name is malformed
            (exit 2).
    """
    import os

    from ..server.settings import get_settings

    try:
        listed = json.loads(os.environ.get("ATTNVIZ_MODELS") or "[]")
    except json.JSONDecodeError as error:
        usage_error(f"ATTNVIZ_MODELS is not JSON: {error}")
    if not isinstance(listed, list) or not all(isinstance(m, str) for m in listed):
        usage_error("ATTNVIZ_MODELS must be a JSON list of model names")
    check_model_names(models or [], "--model")
    check_model_names(listed, "ATTNVIZ_MODELS")
    if not models:
        return
    named = [*models, *(m for m in listed if m not in models)]
    os.environ["ATTNVIZ_MODELS"] = json.dumps(named)
    get_settings.cache_clear()
