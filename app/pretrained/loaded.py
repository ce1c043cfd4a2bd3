"""What every loaded model has, whatever it reads: its names, placement and config's shape.

:class:`LoadedModel` is the base of the text model (:class:`.model.PretrainedModel`), the
image model (:class:`.vision.ImageModel`) and the speech model
(:class:`.speech.SpeechModel`): where the model lies (:mod:`.placement`), a copy on
another device for a request that asks for one, and the config's sizes by their
transformers names.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch

from ..attention.engine import resolve_device
from ..attention.errors import AttentionInputError
from .architectures import POSITIONS_AFTER_PADDING
from .blocks import Block, Family
from .families import FamilySpec, family_spec
from .placement import (
    Placement,
    home_device,
    layers_per_device,
    model_dtype,
    parameter_bytes,
    spread,
)
from .recorder import use_recorder

if TYPE_CHECKING:
    from transformers import PreTrainedModel


AttentionPath = Literal["recorded", "output_attentions"]
"""How a model's weights are obtained: "recorded" (transformers' attention interface, the
fused path: states kept, weights recomputed on demand, :mod:`.recorder`) or
"output_attentions" (the model's own eager weights, returned whole,
:class:`.calls.WeightsRecording`), for families whose modules bypass the interface."""


class ModelFormatError(ValueError):
    """A model AttnViz cannot load or show; the message names the file and what is missing."""


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Whether two devices are one ("cuda" is "cuda:0")."""
    return a.type == b.type and (a.index or 0) == (b.index or 0)


def _config_value(config: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


@dataclass
class LoadedModel:
    """A loaded transformers model of any modality (eval mode, recording attention).

    What every model on offer has: its names, where it lies and how it was placed, its
    config's shape. :class:`PretrainedModel` adds text (a tokenizer, the recorded pass,
    generation); :class:`.vision.ImageModel` adds images; :class:`.speech.SpeechModel`
    adds audio to a text decoder.

    The model is in the dtype and on the devices its :class:`.placement.Placement` chose
    (float32 on the CPU by default).

    Attributes:
        name: what requests name it by.
        source: where it came from (a package and its version, a directory, a GGUF file).
        path: the directory (or GGUF file) it was loaded from.
        family: "encoder", "decoder" or "encoder-decoder".
        model: the transformers model, set to AttnViz's recording attention.
        load_s: how long loading took, in seconds.
        placement: how it was loaded (dtype, device map, memory caps, offload folder).
        reload: loads the same model anew onto one device (from its files), for a
            request that asks for a device the model is not on; None when it cannot be
            (a model handed over from Python).
        attention_path: how its weights are obtained (:data:`AttentionPath`): "recorded"
            unless its warm-up found that its modules bypass the attention interface.
        attention_path_found: whether the warm-up ran (and settled ``attention_path``); a
            second call of :meth:`warm_up` then returns at once
            (the loaders run it: a text model is ready to run once loaded).
    """

    name: str
    source: str
    path: Path
    family: Family
    model: PreTrainedModel
    load_s: float
    placement: Placement = field(default_factory=Placement)
    reload: Callable[[torch.device], PreTrainedModel] | None = field(default=None, repr=False)
    attention_path: AttentionPath = "recorded"
    attention_path_found: bool = field(default=False, repr=False)
    _copies: dict[str, PreTrainedModel] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    modality: ClassVar[str] = "text"
    """What the model reads: "text", "speech" (:mod:`.speech`) or "image" (:mod:`.vision`)."""

    def require(self, modality: str, where: str) -> None:
        """Refuse this model where a model reading ``modality`` is needed.

        Args:
            modality: "text", "speech" or "image".
            where: what to do instead (the route or view this model's input goes to),
                at the end of the message.

        Raises:
            AttentionInputError: (field ``model``) the model reads another modality.
        """
        if self.modality != modality:
            raise AttentionInputError(
                "model", f"{self.name} reads {self.modality}, not {modality}: {where}"
            )

    def warm_up(self) -> None:
        """One small input through the model once it is loaded (torch's lazy start-up).

        Raises:
            ModelFormatError: the model's attention is not reproducible.
        """
        raise NotImplementedError

    @property
    def config(self) -> Any:
        """The model's transformers config."""
        return self.model.config

    @property
    def architecture(self) -> str:
        """The config's ``model_type`` ("bert", "llama", "gpt2", "t5", ...)."""
        return str(self.config.model_type)

    @property
    def spec(self) -> FamilySpec:
        """The family's spec (:mod:`.families`): its blocks, inputs and outputs."""
        return family_spec(self.family)

    @property
    def described(self) -> str:
        """The family with its article, for messages: "an encoder", "a decoder"."""
        return self.spec.described

    @property
    def blocks(self) -> tuple[Block, ...]:
        """The attention blocks of the family, the first the default of every view."""
        return self.spec.blocks

    @property
    def num_layers(self) -> int:
        """N, the layers (of the encoder, for an encoder-decoder)."""
        return int(self.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        """H, the query heads of every layer."""
        return int(self.config.num_attention_heads)

    @property
    def num_key_value_heads(self) -> int:
        """H_kv, the key/value heads the query heads share (H without grouped-query attention)."""
        return _config_value(self.config, "num_key_value_heads") or self.num_heads

    @property
    def d_model(self) -> int:
        """The hidden size."""
        return int(self.config.hidden_size)

    @property
    def d_ff(self) -> int | None:
        """The feed-forward's hidden width, where the config says it."""
        return _config_value(
            self.config, "intermediate_size", "n_inner", "d_ff", "encoder_ffn_dim", "hidden_dim"
        ) or (4 * self.d_model if self.architecture == "gpt2" else None)

    @property
    def vocab_size(self) -> int:
        """Rows of the token embedding (0 for a model without one, an image model)."""
        return _config_value(self.config, "vocab_size") or 0

    @property
    def chat_template(self) -> bool:
        """Whether prompts can be wrapped in a chat template (a text model's tokenizer)."""
        return False

    @property
    def max_tokens(self) -> int | None:
        """The most tokens one input may have (learned positions), or None (relative positions)."""
        value = _config_value(self.config, "max_position_embeddings", "n_positions")
        if value is None or value <= 0:  # XLNet says -1
            return None
        if self.architecture in POSITIONS_AFTER_PADDING:
            value -= int(self.config.pad_token_id) + 1
        return value

    @functools.cached_property
    def num_parameters(self) -> int:
        """Scalar parameters of the model (tied weights counted once)."""
        return sum(p.numel() for p in self.model.parameters())

    @property
    def can_generate(self) -> bool:
        """Whether the model predicts text (a decoder or an encoder-decoder)."""
        return self.spec.reads_text_output

    @functools.cached_property
    def home(self) -> torch.device:
        """Where the model's inputs go: its (first) device; the CPU for a model on disk."""
        return home_device(self.model)

    @property
    def placed(self) -> bool:
        """Whether a device map placed the model: it then runs only where it lies."""
        return self.placement.mapped or spread(self.model)

    @functools.cached_property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's weights."""
        return model_dtype(self.model)

    @functools.cached_property
    def parameter_bytes(self) -> int:
        """Bytes of the model's parameters in their dtype (tied weights counted once)."""
        return parameter_bytes(self.model)

    def layers_per_device(self) -> dict[str, int]:
        """How many transformer blocks lie on each device: "cuda:0", "cpu", "disk", ..."""
        return layers_per_device(self.model)

    def device_for(self, device: str) -> torch.device:
        """The device a request's ``device`` ("auto", "cpu", "cuda") runs this model on.

        "auto" is where the model lies (:attr:`home`); another device is that device,
        where the model is loaded once more (:meth:`on`), unless a device map placed it.

        Raises:
            AttentionInputError: (field ``device``) an unknown device, CUDA where torch
                sees none, or a device other than the model's own for a model placed by
                a device map or handed over from Python.
        """
        if device == "auto":
            return self.home
        wanted = resolve_device(device)
        if _same_device(wanted, self.home):
            return self.home
        if self.placed or self.reload is None:
            raise self._stays_where_it_lies()
        return wanted

    def _stays_where_it_lies(self) -> AttentionInputError:
        where = ", ".join(self.layers_per_device()) or str(self.home)
        how = "a device map (ATTNVIZ_DEVICE_MAP)" if self.placed else "the caller"
        return AttentionInputError(
            "device",
            f"{self.name} was placed by {how} on {where} and runs where it lies; "
            "send device 'auto'",
        )

    def on(self, device: torch.device) -> PreTrainedModel:
        """The model to run on ``device``: itself where it lies, else a copy loaded there once.

        The copy is loaded from the model's files straight onto the device (no float32
        copy in memory first); it goes through the recorder as the model does.

        Raises:
            AttentionInputError: (field ``device``) as :meth:`device_for`.
        """
        if _same_device(device, self.home):
            return self.model
        if self.placed or self.reload is None:
            raise self._stays_where_it_lies()
        key = str(device)
        with self._lock:
            if key not in self._copies:
                copy_on = self.reload(device)
                copy_on.train(False)
                use_recorder(copy_on)
                self._copies[key] = copy_on
            return self._copies[key]

    def placed_on(self, device: str) -> tuple[torch.device, PreTrainedModel]:
        """:meth:`device_for` and :meth:`on` together: where inputs go, and the model to run."""
        run_on = self.device_for(device)
        return run_on, self.on(run_on)

    def block_layers(self, block: Block) -> int:
        """N of one block: an encoder-decoder's decoder may have another depth (T5, BART)."""
        shape = self.spec.block_shapes.get(block)
        return (_config_value(self.config, *shape.layers) if shape else None) or self.num_layers

    def block_heads(self, block: Block) -> int:
        """H of one block (BART's encoder and decoder may have different head counts)."""
        shape = self.spec.block_shapes.get(block)
        return (_config_value(self.config, *shape.heads) if shape else None) or self.num_heads

    def block_kv_heads(self, block: Block) -> int:
        """H_kv of one block: the config's where the family groups heads, else the block's H."""
        return self.num_key_value_heads if self.spec.grouped_kv else self.block_heads(block)
