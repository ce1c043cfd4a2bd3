"""The lengths one input will have when it runs.

Admission (:mod:`.admission`), the methods' bounds and the downloads size a request by
them, before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .blocks import Block

__all__ = ["InputLengths"]


@dataclass(frozen=True)
class InputLengths:
    """The lengths one input will have when it runs.

    Attributes:
        source: the input's tokens (a decoder's prompt; an encoder-decoder's source).
        target: an encoder-decoder's decoder input (start token + target), else None.
        new_tokens: the most tokens generation may add (a decoder's ``max_new_tokens``).
    """

    source: int
    target: int | None = None
    new_tokens: int = 0

    @property
    def total(self) -> int:
        """The source after generation: prompt + new tokens."""
        return self.source + self.new_tokens

    def queries(self, block: Block) -> int:
        """L_q of ``block``: the decoder's and cross attention's are the target's."""
        if self.target is not None and block != "encoder":
            return self.target
        return self.total

    def keys(self, block: Block) -> int:
        """L_k of ``block``: cross attention's keys are the source's."""
        if self.target is not None and block == "decoder":
            return self.target
        return self.total

    @property
    def outputs(self) -> int:
        """The output positions a target may be taken at (the target's, else the input's)."""
        return self.target if self.target is not None else self.total
