"""Where a model's weights live and in which dtype: transformers' and accelerate's loading.

AttnViz loads models as transformers does (``from_pretrained(dtype=..., device_map=...,
max_memory=..., offload_folder=...)``), through accelerate's big-model inference
(https://huggingface.co/docs/accelerate/usage_guides/big_modeling): a model bigger than
one GPU spreads its layers over GPUs, CPU memory and disk, each weight loaded once in
the chosen dtype, straight where it belongs. Four settings say how
(:class:`Placement`):

* ``ATTNVIZ_DTYPE``: ``auto`` (the checkpoint's own dtype on an accelerator, float32
  on the CPU, where bfloat16 matrix products are slow), ``float32``, ``bfloat16`` or
  ``float16``;
* ``ATTNVIZ_DEVICE_MAP``: empty (the default device: CUDA when available, else the
  CPU), ``auto`` (accelerate fills the GPUs, then the CPU, then the disk), one device
  (``cpu``, ``cuda``, ``cuda:1``), or a JSON map of module names to devices
  (``{"model.embed_tokens": 0, "model.layers": "cpu", "lm_head": 0}``);
* ``ATTNVIZ_MAX_MEMORY``: the most each device may hold, JSON in accelerate's
  ``max_memory`` form with ``cuda:N`` also accepted (``{"cuda:0": "70GiB", "cpu":
  "100GiB"}``); given alone it implies ``ATTNVIZ_DEVICE_MAP=auto``;
* ``ATTNVIZ_OFFLOAD_DIR``: where layers that fit nowhere are kept on disk (accelerate's
  ``offload_folder``), read back layer by layer as the forward pass reaches them.

A model spread by a device map runs where it lies; one on a single device can be asked
to run on another, which loads it there once more from its files.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import torch
from torch import nn

from .architectures import LAYER_LISTS

DType = Literal["auto", "float32", "bfloat16", "float16"]
DTYPES: Final[dict[str, torch.dtype]] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
"""The dtypes a model may be loaded in, by name."""
_DEVICE = re.compile(r"^(cpu|disk|mps|meta|cuda|cuda:\d+|xpu|xpu:\d+|\d+)$")


class PlacementError(ValueError):
    """A placement setting that cannot be used; the message names the setting."""


def _device_value(value: Any, setting: str) -> int | str:
    """One device of a map: an int (a GPU) or a device name; ``cuda:N`` becomes N."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PlacementError(f"{setting}: {value!r} is not a device")
    text = str(value).strip()
    if not _DEVICE.match(text):
        raise PlacementError(
            f"{setting}: {value!r} is not a device (an integer GPU, cuda:N, cpu, mps or disk)"
        )
    if text.isdigit():
        return int(text)
    if text.startswith("cuda:"):
        return int(text.removeprefix("cuda:"))
    return "cuda" if text == "cuda" else text


def _json_object(text: str, setting: str) -> dict[str, Any]:
    """A setting's value read as a non-empty JSON object.

    Raises:
        PlacementError: naming ``setting``: not JSON, or not a non-empty object.
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise PlacementError(f"{setting}: not JSON: {error}") from error
    if not isinstance(raw, dict) or not raw:
        raise PlacementError(f"{setting}: must be a non-empty JSON object")
    return raw


@dataclass(frozen=True)
class Placement:
    """How models are loaded: dtype and device map, from the ``ATTNVIZ_`` settings.

    Hashable (the settings are kept as given), so that a loaded model is cached per
    placement. :meth:`check` validates the settings at start-up.

    Attributes:
        dtype: "auto", "float32", "bfloat16" or "float16" (``ATTNVIZ_DTYPE``).
        device_map: "" (the default device), "auto", a device, or a JSON object
            (``ATTNVIZ_DEVICE_MAP``).
        max_memory: "" or a JSON object, device -> bytes or a size such as "70GiB"
            (``ATTNVIZ_MAX_MEMORY``).
        offload_dir: a folder for weights offloaded to disk, or None
            (``ATTNVIZ_OFFLOAD_DIR``).
    """

    dtype: DType = "auto"
    device_map: str = ""
    max_memory: str = ""
    offload_dir: Path | None = None

    def check(self) -> Placement:
        """Raise :class:`PlacementError` naming the setting when one cannot be used."""
        if self.dtype not in ("auto", *DTYPES):
            raise PlacementError(
                f"ATTNVIZ_DTYPE: {self.dtype!r}; choose auto, float32, bfloat16 or float16"
            )
        self.parsed_device_map()
        self.parsed_max_memory()
        return self

    @property
    def mapped(self) -> bool:
        """Whether accelerate places the model (a device map or a memory cap is set)."""
        return bool(self.device_map.strip() or self.max_memory.strip())

    def parsed_device_map(self) -> str | dict[str, int | str] | None:
        """``device_map`` for ``from_pretrained``: None, "auto", a device, or a map.

        Raises:
            PlacementError: (``ATTNVIZ_DEVICE_MAP``) not "auto", a device or a JSON
                object of module names to devices.
        """
        text = self.device_map.strip()
        if not text:
            return "auto" if self.max_memory.strip() else None
        if text == "auto":
            return "auto"
        if text.startswith("{"):
            raw = _json_object(text, "ATTNVIZ_DEVICE_MAP")
            return {str(k): _device_value(v, "ATTNVIZ_DEVICE_MAP") for k, v in raw.items()}
        device = _device_value(text, "ATTNVIZ_DEVICE_MAP")
        return f"cuda:{device}" if isinstance(device, int) else device

    def parsed_max_memory(self) -> dict[int | str, int | str] | None:
        """``max_memory`` for ``from_pretrained``, GPUs as ints (accelerate's keys).

        Raises:
            PlacementError: (``ATTNVIZ_MAX_MEMORY``) not a JSON object of devices to
                sizes (an int of bytes or a string such as "200MiB").
        """
        text = self.max_memory.strip()
        if not text:
            return None
        raw = _json_object(text, "ATTNVIZ_MAX_MEMORY")
        limits: dict[int | str, int | str] = {}
        for key, size in raw.items():
            device = _device_value(key, "ATTNVIZ_MAX_MEMORY")
            if device == "cuda":
                device = 0
            if isinstance(size, bool) or not isinstance(size, int | str):
                raise PlacementError(f"ATTNVIZ_MAX_MEMORY: {key}: {size!r} is not a size")
            if isinstance(size, str):
                from accelerate.utils import convert_file_size_to_int  # type: ignore[import-untyped]

                try:
                    convert_file_size_to_int(size)
                except ValueError as error:
                    raise PlacementError(
                        f"ATTNVIZ_MAX_MEMORY: {key}: {size!r} is not a size such as '200MiB'"
                    ) from error
            limits[device] = size
        return limits

    def on_accelerator(self) -> bool:
        """Whether the weights go to a GPU (or another accelerator), for ``dtype="auto"``."""
        device_map = self.parsed_device_map()
        if device_map is None:
            return torch.cuda.is_available()
        if device_map == "auto":
            memory = self.parsed_max_memory()
            if memory is not None:
                return any(not isinstance(k, str) or k == "mps" for k in memory)
            return torch.cuda.is_available()
        if isinstance(device_map, str):
            return device_map not in ("cpu", "disk", "meta")
        return any(not isinstance(v, str) or v in ("cuda", "mps") for v in device_map.values())

    def torch_dtype(self, config: Any) -> torch.dtype:
        """The dtype the weights are loaded in for ``config``'s checkpoint.

        ``auto``: the checkpoint's dtype (``config.dtype``, float32 when it says none)
        on an accelerator, float32 on the CPU.
        """
        if self.dtype != "auto":
            return DTYPES[self.dtype]
        if not self.on_accelerator():
            return torch.float32
        stated = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        if isinstance(stated, str):
            stated = DTYPES.get(stated.removeprefix("torch."))
        return stated if isinstance(stated, torch.dtype) else torch.float32

    def loading_options(self, config: Any) -> dict[str, Any]:
        """The keyword arguments of ``from_pretrained`` for ``config``'s checkpoint.

        Raises:
            PlacementError: as :meth:`parsed_device_map` and :meth:`parsed_max_memory`.
        """
        options: dict[str, Any] = {"dtype": self.torch_dtype(config)}
        device_map = self.parsed_device_map()
        if device_map is None:
            default = "cuda" if torch.cuda.is_available() else None
            if default is not None:
                options["device_map"] = default
            return options
        options["device_map"] = device_map
        memory = self.parsed_max_memory()
        if memory is not None:
            options["max_memory"] = memory
        if self.offload_dir is not None:
            self.offload_dir.mkdir(parents=True, exist_ok=True)
            options["offload_folder"] = str(self.offload_dir)
        return options

    def single_device(self, device: torch.device, config: Any) -> dict[str, Any]:
        """``from_pretrained`` options that load a whole model onto ``device``."""
        options: dict[str, Any] = {"dtype": self.torch_dtype(config)}
        if device.type != "cpu":
            options["device_map"] = str(device)
        return options


def layer_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The transformer blocks of ``model`` by name: the items of its lists of layers.

    The lists are the ``nn.ModuleList`` children named as :data:`LAYER_LISTS` whose
    items are all of one class (an encoder-decoder has two). Lists inside a block
    (its sublayers) are not counted.
    """
    blocks: list[tuple[str, nn.Module]] = []
    inside: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(prefix + ".") for prefix in inside):
            continue
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(module, nn.ModuleList) and leaf in LAYER_LISTS and len(module) > 0:
            classes = {type(item) for item in module}
            if len(classes) == 1:
                blocks.extend((f"{name}.{i}", item) for i, item in enumerate(module))
                inside.append(name)
    return blocks


def device_name(value: int | str | torch.device) -> str:
    """A device as /api/v1/models writes it: "cuda:0", "cpu", "disk", "mps"."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"cuda:{value}"
    text = str(value)
    return "cuda:0" if text == "cuda" else text


def module_devices(model: nn.Module) -> dict[str, str]:
    """Where each transformer block lies: its name -> "cuda:N", "cpu", "mps" or "disk".

    From accelerate's ``hf_device_map`` (the longest module name that prefixes the
    block's), else the device of the block's first parameter.
    """
    device_map: dict[str, int | str] | None = getattr(model, "hf_device_map", None)
    places: dict[str, str] = {}
    for name, block in layer_modules(model):
        place: str | None = None
        if device_map:
            match = max(
                (k for k in device_map if k == "" or name == k or name.startswith(k + ".")),
                key=len,
                default=None,
            )
            if match is not None:
                place = device_name(device_map[match])
        if place is None:
            parameter = next(block.parameters(), None)
            place = "cpu" if parameter is None else device_name(parameter.device)
        places[name] = place
    return places


def layers_per_device(model: nn.Module) -> dict[str, int]:
    """How many transformer blocks lie on each device ("disk" included), in that order."""
    return dict(Counter(module_devices(model).values()))


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters in their dtype (tied weights counted once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def model_dtype(model: nn.Module) -> torch.dtype:
    """The dtype most of the model's parameter bytes are in."""
    sizes: Counter[torch.dtype] = Counter()
    for p in model.parameters():
        if p.is_floating_point():
            sizes[p.dtype] += p.numel()
    return sizes.most_common(1)[0][0] if sizes else torch.float32


def home_device(model: nn.Module) -> torch.device:
    """Where a model's inputs go: its first mapped module's device (the embeddings).

    A block offloaded to disk or kept on the CPU by accelerate runs on the CPU.
    """
    device_map: dict[str, int | str] | None = getattr(model, "hf_device_map", None)
    if device_map:
        first = next(iter(device_map.values()))
        name = device_name(first)
        return torch.device("cpu" if name == "disk" else name)
    parameter = next(model.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


def spread(model: nn.Module) -> bool:
    """Whether accelerate dispatched the model over more than one device (or the disk)."""
    device_map: dict[str, int | str] | None = getattr(model, "hf_device_map", None)
    if not device_map:
        return False
    return len({device_name(v) for v in device_map.values()}) > 1 or "disk" in {
        device_name(v) for v in device_map.values()
    }
