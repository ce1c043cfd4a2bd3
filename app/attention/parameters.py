"""Seeded parameter initialisation: the same seed gives the same parameters everywhere.

Every parameter is drawn on the CPU from one ``torch.Generator`` seeded with ``seed``,
module by module in registration order (``module.modules()``), weight before bias,
with PyTorch's default initialisers:

* ``nn.Embedding``: N(0, 1);
* ``nn.Linear``: weight ``kaiming_uniform_(a=sqrt(5))``, i.e. U(-1/sqrt(fan_in),
  1/sqrt(fan_in)), and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in));
* ``nn.LayerNorm``: weight 1, bias 0 (nothing drawn).

Modules are built on the meta device first, so PyTorch's own initialisation never
consumes the global RNG.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

ModuleT = TypeVar("ModuleT", bound=nn.Module)


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

    Args:
        factory: builds the module (its parameters land on the meta device).
        seed: seed of the generator that draws every parameter.

    Returns:
        The module on the CPU with every parameter drawn from ``seed``.
    """
    with torch.device("meta"):
        module = factory()
    module.to_empty(device="cpu")
    seeded_init_(module, seed)
    return module
