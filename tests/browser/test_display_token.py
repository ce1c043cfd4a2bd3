"""Python's views show a token as the page does (issue 53: ``head_examples`` showed ``Ġ``
where the page shows ``␣``): :func:`attnviz.views.display.display_token` against the page's
own ``displayToken`` (static/js/lib/display.js, run in Chromium), on every token of a
byte-level BPE vocabulary trained here on multilingual text, on SentencePiece-style tokens
and on every single byte character."""

from __future__ import annotations

import random
from typing import Any

from attnviz.views.display import BYTE_OF, display_tokens

TEXT = (
    "The café's naïve coöperation — 東京 and 北京, emoji 😀🎉 and ﬁ ligatures.\n"
    "\tTabs,  double  spaces,\r\nWindows lines, a bell \x07 and DEL \x7f.\n"
    "Ünïcödé ẞ ß Ω ж ק ع हिन्दी 한국어 ❤️ 👩‍👩‍👧 \ufeffbom and ‐ dashes … end\n"
)


def vocabulary() -> list[str]:
    """Byte-level BPE tokens (tokenizers' ByteLevelBPETokenizer trained on TEXT: whole
    characters, pieces of characters, spaces, newlines), SentencePiece tokens, every byte
    character alone and random strings of them."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([TEXT] * 20, vocab_size=600, min_frequency=1, show_progress=False)
    tokens = sorted(bpe.get_vocab())
    pieces = ["▁the", "▁", "▁▁", "<0x0A>", "<0x09>", "<0x07>", "<0xE2>", "<0x20>", "▁café"]
    pieces += ["ï»¿", "ï»¿bom", "Ġï»¿"]  # a byte order mark: TextDecoder drops a leading one
    singles = list(BYTE_OF)
    rng = random.Random(0)
    mixed = ["".join(rng.choices(singles, k=rng.randint(1, 6))) for _ in range(2000)]
    return [*tokens, *pieces, *singles, *mixed, "##ing", "[CLS]", "a\tb", "\x00", "\x9f"]


def test_python_shows_every_token_as_the_page_does(page: Any, server_url: str) -> None:
    tokens = vocabulary()
    assert len(tokens) > 2500 and any("Ġ" in t for t in tokens) and any("Ċ" in t for t in tokens)
    page.goto(server_url + "/")
    shown = page.evaluate(
        "async (tokens) => (await import('/static/js/lib/display.js')).displayTokens(tokens)",
        tokens,
    )
    expected = display_tokens(tokens)
    differ = [(t, js, py) for t, js, py in zip(tokens, shown, expected, strict=True) if js != py]
    assert not differ, differ[:20]
    assert not page.errors
