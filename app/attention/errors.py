"""The one error type the engine raises for input it cannot run."""

from __future__ import annotations


class AttentionInputError(ValueError):
    """A user input the engine cannot run; ``field`` names the offending input.

    The message starts with the field name, e.g.
    ``"num_heads: d_model=10 is not divisible by num_heads=3"``.

    Attributes:
        field: the request field at fault, e.g. ``"num_heads"`` or ``"sequences"``.
        message: the explanation without the field prefix.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
