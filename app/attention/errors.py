"""The one error type the engine raises for input it cannot run."""

from __future__ import annotations


class AttentionInputError(ValueError):
    """A user input the engine cannot run; ``field`` names the offending input.

    The message starts with the field name, e.g. ``"sequences[1]: the sequence is
    empty"``, or ``"num_heads must divide d_model (10): try 1, 2, 5 or 10"`` where the
    message already does.

    Attributes:
        field: the request field at fault, e.g. ``"num_heads"`` or ``"sequences"``.
        message: the explanation without the field prefix.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message if message.startswith(field) else f"{field}: {message}")
        self.field = field
        self.message = message


class UnsupportedInputError(AttentionInputError):
    """An input in a format not accepted at all (an image outside the accepted formats).

    The server answers 415 naming ``field``.
    """


class InputTooLargeError(AttentionInputError):
    """An input whose computation would need more than a configured budget (memory).

    The server answers 413 naming ``field``, with the estimate and the limit in the message.
    """


def too_many_numbers(field: str, cells: int, limit: int, advice: str) -> InputTooLargeError:
    """The error for a response that would carry ``cells`` numbers, over ``limit``.

    Args:
        field: the request field the error names.
        cells: the numbers the response would carry.
        limit: ATTNVIZ_MAX_WEIGHT_CELLS.
        advice: what to change, at the end of the message.
    """
    return InputTooLargeError(
        field,
        f"the response would carry {cells} numbers ({cells * 4 / 2**20:.0f} MiB as "
        f"float32: attention weights and the stages asked for), over the limit of "
        f"{limit} (ATTNVIZ_MAX_WEIGHT_CELLS); {advice}",
    )
