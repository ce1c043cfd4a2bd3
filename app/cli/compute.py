"""``attnviz compute``: the toy engine's response JSON, as POST /api/v1/attention answers."""

from __future__ import annotations

import argparse
from typing import Any, cast

from .common import DefaultsShown, build_request, input_arguments, invalid_input, write_output


def run(args: argparse.Namespace) -> None:
    """Write the API's response JSON for the request."""
    from fastapi import HTTPException

    from ..server.payloads.attention import attention_payload
    from ..server.transport import stream_json

    request = build_request(args)
    try:
        payload = attention_payload(request)
    except HTTPException as error:  # the engine's errors, naming the field
        details = cast(list[dict[str, Any]], error.detail)
        raise invalid_input([(d["loc"][1:], d["msg"]) for d in details]) from None
    write_output(b"".join(stream_json(payload)), args.output)


def add_parser(commands: Any) -> None:
    """``compute`` and its options, on the main parser's subcommands."""
    parser = commands.add_parser(
        "compute", help="write the attention response JSON", formatter_class=DefaultsShown
    )
    input_arguments(parser)
    parser.set_defaults(run=run)
