"""The readable form of a token in Python views, as the pages show it (issue 53: the atlas's
examples showed ``Ġcat`` where the page shows ``␣cat``).

The cases below are the page's documented ones (static/js/lib/display.js);
tests/browser/test_display_token.py compares the two functions on a whole vocabulary.
"""

from __future__ import annotations

import pytest
from attnviz.views.display import BYTE_OF, display_token, display_tokens


@pytest.mark.parametrize(
    ("token", "shown"),
    [
        ("Ġcapital", "␣capital"),  # byte-level BPE: a space
        ("ĠcafÃ©", "␣café"),  # its bytes are UTF-8 text
        ("Ċ", "↵"),
        ("ĉ", "⇥"),
        ("ĊĊ", "↵↵"),
        ("âĢ", "âĢ"),  # a piece of a character: not whole UTF-8, only its markers changed
        ("ðŁĺ", "ðŁĺ"),
        ("▁the", "␣the"),  # SentencePiece
        ("<0x0A>", "↵"),
        ("<0x09>", "⇥"),
        ("<0xE2>", "<0xE2>"),  # a byte above 127 alone is no character
        ("<0x41>\n", "<0x41>↵"),  # not a byte piece: a whole token only
        ("##ing", "##ing"),  # WordPiece is shown as written
        ("[CLS]", "[CLS]"),
        ("a b", "a␣b"),
        ("bell\x07", "bell\\x07"),  # other control characters: their code
        ("", ""),
        (7, "7"),
    ],
)
def test_a_token_is_shown_as_the_page_shows_it(token: object, shown: str) -> None:
    assert display_token(token) == shown


def test_every_byte_has_one_printable_character() -> None:
    # GPT-2's bytes_to_unicode: 256 characters, one per byte, none of them whitespace
    assert sorted(BYTE_OF.values()) == list(range(256))
    assert not any(ch.isspace() for ch in BYTE_OF)
    tokens = ["".join(ch for ch, b in BYTE_OF.items() if b == byte) for byte in b"hi there"]
    assert display_tokens(["".join(tokens)]) == ["hi␣there"]
