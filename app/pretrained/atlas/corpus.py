"""A corpus file read as passages, a line at a time, each cut to what a pass can use.

``attnviz atlas --corpus`` reads ``.txt`` (a passage a line), ``.jsonl`` (a ``text``
field a line) or ``.parquet`` (a ``text`` column). :func:`read_corpus` never holds more of
a passage than :data:`CHARS_PER_TOKEN` characters per token a pass keeps: a 60 MB line of
one passage costs ``max_tokens`` x 64 characters, and the tokenizer (which runs without
returning to Python, so Ctrl-C waits for it) is never given more
(:func:`.inputs.natural_tokens` reads a prefix of that). Text that is not UTF-8 is refused
by line (:class:`AttentionInputError`, field ``corpus``), and ``progress`` counts the bytes
read, for a bar.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Final

from ...attention.errors import AttentionInputError

__all__ = ["CHARS_PER_TOKEN", "MAX_JSON_LINE_BYTES", "passage_chars", "read_corpus"]

CHARS_PER_TOKEN: Final = 64
"""Characters a passage keeps per token at most (``max_tokens`` x this): far more than any
tokenizer's tokens span (GPT-2's and Llama's longest are runs of 16 to 32 spaces), so a
passage's first ``max_tokens`` tokens lie in what is kept; the rest of a longer line is
skipped unread into memory."""
MAX_JSON_LINE_BYTES: Final = 64 * 2**20
"""The longest ``.jsonl`` line read (a JSON line is parsed whole): 64 MiB."""
READ_BYTES: Final = 2**20
"""Bytes read at a time while skipping the rest of a long line."""


def passage_chars(max_tokens: int) -> int:
    """The characters of a passage kept for ``max_tokens`` tokens (:data:`CHARS_PER_TOKEN`)."""
    return max_tokens * CHARS_PER_TOKEN


def read_corpus(
    path: str | Path,
    *,
    max_chars: int | None = None,
    progress: Callable[[int], object] | None = None,
) -> list[str]:
    """The passages of a corpus file: ``.txt``, ``.jsonl`` or ``.parquet``.

    ``.txt``: one a line; ``.jsonl``: a ``text`` field a line; ``.parquet``: a ``text``
    column (read with pyarrow, which the ray extra installs). Blank passages are skipped.

    Args:
        max_chars: each passage is cut to this many characters (:func:`passage_chars`),
            and of a ``.txt`` line no more is held; None keeps passages whole.
        progress: called with the bytes read since its last call (a ``.parquet`` file:
            once, its size).

    Raises:
        AttentionInputError: (field ``corpus``) no such file, another format, a line that
            is not UTF-8 (its number and byte), a JSON line without a string ``text`` or
            over :data:`MAX_JSON_LINE_BYTES`, a Parquet file without a string ``text``
            column (or no pyarrow to read it), or no passage.
    """
    file = Path(path)
    if not file.is_file():
        raise AttentionInputError("corpus", f"{file}: no such file")
    if file.suffix not in (".txt", ".jsonl", ".parquet"):
        raise AttentionInputError(
            "corpus",
            f"{file}: a .txt (a passage a line), .jsonl (a 'text' field a line) or .parquet "
            "(a 'text' column)",
        )
    if file.suffix == ".parquet":
        texts = [text[:max_chars] for text in _parquet_texts(file) if text.strip()]
        if progress is not None:
            progress(file.stat().st_size)
    else:
        with file.open("rb") as stream:
            texts = list(_passages(file, stream, max_chars, progress))
    if not texts:
        raise AttentionInputError("corpus", f"{file}: no passage in it")
    return texts


def _passages(
    file: Path, stream: BinaryIO, max_chars: int | None, progress: Callable[[int], object] | None
) -> list[str]:
    """The passages of a .txt or .jsonl file, a line at a time."""
    jsonl = file.suffix == ".jsonl"
    # UTF-8 holds a character in 4 bytes at most
    text_limit = -1 if max_chars is None else 4 * max_chars + 1
    limit = MAX_JSON_LINE_BYTES + 1 if jsonl else text_limit
    found: list[str] = []
    number = 0
    while data := stream.readline(limit):
        number += 1
        read = len(data)
        cut = not data.endswith(b"\n") and len(data) == limit
        if cut:  # a line longer than the limit: skip its rest
            if jsonl:
                raise AttentionInputError(
                    "corpus",
                    f"{file}:{number}: a JSON line over {MAX_JSON_LINE_BYTES // 2**20} MiB",
                )
            while chunk := stream.readline(READ_BYTES):
                read += len(chunk)
                if chunk.endswith(b"\n"):
                    break
        if progress is not None:
            progress(read)
        text = _decoded(file, number, data, final=not cut)
        lines = text.splitlines() or [""]  # as str.splitlines splits (\r, \x1c, U+2028)
        for line in lines:
            if jsonl:
                line = _json_text(file, number, line)
            if line.strip():
                found.append(line if max_chars is None else line[:max_chars])
    return found


def _decoded(file: Path, number: int, data: bytes, final: bool) -> str:
    """One line's bytes as text; a cut line's last partial character dropped."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        return decoder.decode(data, final=final)
    except UnicodeDecodeError as error:
        raise AttentionInputError(
            "corpus",
            f"{file}:{number}: not UTF-8 text ({error.reason} at byte {error.start} of the "
            "line): a corpus is UTF-8 text",
        ) from None


def _json_text(file: Path, number: int, line: str) -> str:
    if not line.strip():
        return ""
    try:
        text = json.loads(line).get("text")
    except (ValueError, AttributeError) as error:
        raise AttentionInputError("corpus", f"{file}:{number}: {error}") from error
    if not isinstance(text, str):
        raise AttentionInputError("corpus", f"{file}:{number}: no string 'text' field")
    return text


def _parquet_texts(file: Path) -> list[str]:
    """The ``text`` column of a Parquet file, nulls as empty passages.

    Raises:
        AttentionInputError: (``corpus``) no pyarrow, not Parquet, or no string column
            ``text``.
    """
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise AttentionInputError(
            "corpus", f"{file}: reading Parquet needs pyarrow (pip install 'attnviz[ray]')"
        ) from None
    try:
        schema = pq.read_schema(file)
        if "text" not in schema.names:
            raise AttentionInputError(
                "corpus", f"{file}: no 'text' column (it has {', '.join(schema.names)})"
            )
        kind = schema.field("text").type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise AttentionInputError(
                "corpus", f"{file}: the 'text' column holds {kind}, not strings"
            )
        column = pq.read_table(file, columns=["text"]).column("text")
    except (pa.ArrowException, OSError) as error:
        raise AttentionInputError("corpus", f"{file}: not a Parquet file ({error})") from None
    return [text or "" for text in column.to_pylist()]
