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

import json
import re
from collections.abc import Callable, Iterator
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
"""Bytes of a .txt corpus read at a time."""
LINE_BREAKS: Final = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""Where :meth:`str.splitlines` ends a line: a .txt passage ends at any of them."""


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
    lines = (
        _json_lines(file, stream, progress)
        if file.suffix == ".jsonl"
        else _text_lines(file, stream, max_chars, progress)
    )
    return [line if max_chars is None else line[:max_chars] for line in lines if line.strip()]


def _text_lines(
    file: Path, stream: BinaryIO, max_chars: int | None, progress: Callable[[int], object] | None
) -> Iterator[str]:
    """The lines of a .txt file as :meth:`str.splitlines` splits them, each cut to fit.

    Each line is cut to ``max_chars`` characters; the file is read :data:`READ_BYTES` at a
    time, so memory holds one chunk and the kept part of one line, however long the line.

    Raises:
        AttentionInputError: (``corpus``) bytes that are not UTF-8, with their line.
    """
    carry = b""  # an incomplete UTF-8 character at the end of the bytes read so far
    tail = ""  # a "\r" at the end of the text so far: "\r\n" may be split between chunks
    line: list[str] = []
    room = max_chars if max_chars is not None else -1  # characters the line may still keep
    number = 1
    while True:
        chunk = stream.read(READ_BYTES)
        if progress is not None and chunk:
            progress(len(chunk))
        data = carry + chunk
        end = _complete(data) if chunk else len(data)
        try:
            text = tail + data[:end].decode("utf-8")
        except UnicodeDecodeError as error:
            before = tail + data[: error.start].decode("utf-8", "replace")
            at = number + len(LINE_BREAKS.findall(before))
            raise AttentionInputError(
                "corpus", f"{file}:{at}: not UTF-8 text ({error.reason}): a corpus is UTF-8 text"
            ) from None
        carry, tail = data[end:], ""
        if chunk and text.endswith("\r"):
            text, tail = text[:-1], "\r"
        start = 0
        for match in LINE_BREAKS.finditer(text):
            if room != 0:
                piece = text[start : match.start()]
                line.append(piece if room < 0 else piece[:room])
                room = room if room < 0 else room - len(line[-1])
            yield "".join(line)
            line, room = [], max_chars if max_chars is not None else -1
            number += 1
            start = match.end()
        if room != 0:
            piece = text[start:]
            line.append(piece if room < 0 else piece[:room])
            room = room if room < 0 else room - len(line[-1])
        if not chunk:
            break
    if line:
        yield "".join(line)


def _complete(data: bytes) -> int:
    """How many bytes of ``data`` end on a whole UTF-8 character (the rest waits for more)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back
            continue
        need = (
            2
            if byte >> 5 == 0b110
            else 3
            if byte >> 4 == 0b1110
            else 4
            if byte >> 3 == 0b11110
            else 1
        )
        return len(data) - back if back < need else len(data)
    return len(data)


def _json_lines(
    file: Path, stream: BinaryIO, progress: Callable[[int], object] | None
) -> Iterator[str]:
    """The ``text`` of each line of a .jsonl file, each line whole.

    Lines end at a newline only (a JSON string may hold U+2028 or U+0085 as it is), and
    hold at most :data:`MAX_JSON_LINE_BYTES`.

    Raises:
        AttentionInputError: (``corpus``) a line that is not UTF-8, not JSON, without a
            string ``text``, or too long; its number named.
    """
    number = 0
    while data := stream.readline(MAX_JSON_LINE_BYTES + 1):
        number += 1
        if progress is not None:
            progress(len(data))
        if not data.endswith(b"\n") and len(data) > MAX_JSON_LINE_BYTES:
            raise AttentionInputError(
                "corpus", f"{file}:{number}: a JSON line over {MAX_JSON_LINE_BYTES // 2**20} MiB"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise AttentionInputError(
                "corpus",
                f"{file}:{number}: not UTF-8 text ({error.reason}): a corpus is UTF-8 text",
            ) from None
        yield _json_text(file, number, text)


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
