"""The token-id batches of the tutorials, used by the presets, the API examples and the tests."""

from __future__ import annotations

from typing import Final

TUTORIAL_BATCH: Final[list[list[int]]] = [
    [62, 13, 47, 39, 78, 33, 56, 13],
    [60, 96, 51, 32, 90],
    [35, 45, 48, 65, 91, 99, 92, 10, 3, 21],
    [66, 88, 98, 47],
    [77, 65, 51, 77, 19, 15, 35, 19, 23],
]
"""The 5-sequence id batch of tutorial 000_ead306c3acdd1f55.txt section 7.2."""

TUTORIAL_TARGETS: Final[list[list[int]]] = [
    [33, 11, 49, 10],
    [88, 34, 5, 29, 99, 45, 11, 25],
    [67, 25, 15, 90, 54, 4, 92, 10, 46, 20, 88, 19],
    [16, 58, 91, 47, 12, 5, 8],
    [71, 63, 62, 7, 9, 11, 55, 91, 32, 48],
]
"""The 5 target sequences of tutorial 000 section 7.8 (encoder-decoder attention)."""
