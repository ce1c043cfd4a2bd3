"""Seeded parameter initialisation: the same seed gives the same parameters everywhere.

Every parameter is drawn on the CPU from one ``torch.Generator`` seeded with ``seed``,
module by module in registration order (``module.modules()``), weight before bias,
with PyTorch's default initialisers:

* ``nn.Embedding``: N(0, 1);
* ``nn.Linear``: weight ``kaiming_uniform_(a=sqrt(5))``, i.e. U(-1/sqrt(fan_in),
  1/sqrt(fan_in)), and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in));
* ``nn.LayerNorm``: weight 1, bias 0 (nothing drawn).

Modules are built on the meta device first, with PyTorch's own initialisers skipped
(:class:`SkipInit`), so they never consume the global RNG nor draw values that are
replaced.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

ModuleT = TypeVar("ModuleT", bound=nn.Module)


class SkipInit(TorchFunctionMode):
    """``torch.nn.init``'s drawing initialisers, skipped while active (in this thread).

    ``normal_``, ``uniform_``, ``kaiming_uniform_`` and the others that dispatch through
    torch function modes return their tensor untouched; ``ones_``, ``zeros_`` and the rest
    of torch run.

    :func:`build_seeded` draws every parameter afterwards. Skipping PyTorch's own draws also
    skips ``nn.Embedding``'s ``normal_`` on the meta device, whose Python reference
    implementation imports ``torch._dynamo`` (2.4 CPU-s, once per process) in a process that
    otherwise never needs it: the server's and the CLI's first toy computation.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


def seeded_init_(module: nn.Module, seed: int) -> None:
    """Fill every Embedding, Linear and LayerNorm parameter of ``module`` from ``seed``.

    Raises:
        TypeError: if ``module`` holds a parameterised submodule of another kind
            (it would be left uninitialised).
    """
    generator = torch.Generator().manual_seed(seed)
    known = (nn.Embedding, nn.Linear, nn.LayerNorm)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.Embedding):
                nn.init.normal_(sub.weight, generator=generator)
            elif isinstance(sub, nn.Linear):
                bound = 1.0 / math.sqrt(sub.in_features)
                nn.init.kaiming_uniform_(sub.weight, a=math.sqrt(5), generator=generator)
                if sub.bias is not None:
                    nn.init.uniform_(sub.bias, -bound, bound, generator=generator)
            elif isinstance(sub, nn.LayerNorm):
                nn.init.ones_(sub.weight)
                nn.init.zeros_(sub.bias)
            elif not isinstance(sub, known) and any(True for _ in sub.parameters(recurse=False)):
                raise TypeError(f"no seeded initialiser for {type(sub).__name__}")


def build_seeded(factory: Callable[[], ModuleT], seed: int) -> ModuleT:
    """``factory()`` built on the meta device, materialised on the CPU, seeded.

    PyTorch's own initialisers are skipped while it is built (:class:`SkipInit`).

    Args:
        factory: builds the module (its parameters land on the meta device).
        seed: seed of the generator that draws every parameter.

    Returns:
        The module on the CPU with every parameter drawn from ``seed``.
    """
    with torch.device("meta"), SkipInit():
        module = factory()
    module.to_empty(device="cpu")
    seeded_init_(module, seed)
    return module
