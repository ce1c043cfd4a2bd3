r"""One readable form of a token, as the pages show it (static/js/lib/display.js's twin).

The API's tokens are the tokenizer's own strings (``Ġcapital``, ``▁the``, ``<0x0A>``);
every view writes them one way:

- byte-level BPE (GPT-2, Llama 3, SmolLM2) writes each byte as a printable character
  (GPT-2's ``bytes_to_unicode``: a space is ``Ġ``, a newline ``Ċ``, é is ``Ã©``): a token
  made only of those characters is turned back into its bytes and, when they are whole
  UTF-8, into its text (``Ġcapital`` -> ``␣capital``, ``ĠcafÃ©`` -> ``␣café``);
- SentencePiece writes a space as ``▁`` (and bytes as ``<0x0A>``);
- then a space shows as ␣, a newline as ↵, a tab as ⇥, other control characters as their
  code (``\x07`` for the bell).

Source: openai/gpt-2 ``encoder.py`` ``bytes_to_unicode``; transformers' GPT2Tokenizer.
``tests/browser/test_display_token.py`` checks this function against the page's on every token of
a real vocabulary.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["display_token", "display_tokens"]


def _byte_of() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: a character -> its byte.

    The printable bytes map to themselves, the other 68 (0-32, 127-160, 173) to U+0100
    onwards, in order.
    """
    found: dict[str, int] = {}
    shifted = 0
    for byte in range(256):
        if 33 <= byte <= 126 or 161 <= byte <= 172 or byte >= 174:
            found[chr(byte)] = byte
        else:
            found[chr(256 + shifted)] = byte
            shifted += 1
    return found


BYTE_OF: Final = _byte_of()
_SHIFTED: Final = re.compile("[\u0100-\u0143]")  # only byte-level BPE writes these
_LATIN_PAIR: Final = re.compile("[\u00a1-\u00ff]{2}")
_SENTENCEPIECE_BYTE: Final = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_WHITESPACE: Final = {" ": "␣", "\n": "↵", "\r": "↵", "\t": "⇥"}
_CONTROL: Final = re.compile("[\u0000-\u001f\u007f-\u009f]")


def _byte_level_text(token: str) -> str | None:
    """The token's bytes as text, when it is byte-level BPE and they are whole UTF-8."""
    if not _SHIFTED.search(token) and not _LATIN_PAIR.search(token):
        return None
    try:
        data = bytes(BYTE_OF[ch] for ch in token)
    except KeyError:
        return None
    try:  # as the page's TextDecoder: a leading byte order mark is dropped
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        return None  # a piece of a character (an emoji split over tokens): its markers only


def _visible_whitespace(text: str) -> str:
    text = re.sub(r"[ \n\r\t]", lambda m: _WHITESPACE[m.group()], text)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def display_token(token: Any) -> str:
    """The readable form of one token string (the module docstring); else ``str(token)``.

    Args:
        token: a token as the tokenizer writes it (any value: its ``str``).

    Returns:
        The form every view of the pages shows (``Ġcat`` -> ``␣cat``).
    """
    text = str(token)
    piece = _SENTENCEPIECE_BYTE.fullmatch(text)
    if piece:
        byte = int(piece.group(1), 16)
        return _visible_whitespace(chr(byte)) if byte < 128 else text
    decoded = _byte_level_text(text)
    if decoded is not None:
        return _visible_whitespace(decoded)
    plain = re.sub("[Ġ▁]", " ", text).replace("Ċ", "\n").replace("ĉ", "\t")
    return _visible_whitespace(plain)


def display_tokens(tokens: Any) -> list[str]:
    """:func:`display_token` of each token of a sequence."""
    return [display_token(token) for token in tokens]
