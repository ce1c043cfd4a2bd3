"""One loaded transformers model, any family: where it lies, and a pass recording attention.

transformers is the runtime for every pretrained model AttnViz shows, the packaged
all-MiniLM-L6-v2 and SmolLM2-135M-Instruct included. The model runs with AttnViz's
recording attention (:mod:`.recorder`): each attention layer's query and key states,
the mask the model built and its scaling are kept, and the weights of any head are
computed afterwards by the model's own eager attention, to 1e-5 of transformers'
``output_attentions`` (``attn_implementation="eager"``). Memory then grows as
layers x L x d_model during the pass, and one layer's L x L maps at a time after it.
An observer (:class:`.computing.AttentionObserver`) instead takes each layer's weights
during the pass.

The rest of the runtime, by concern: loading and placement (:mod:`.loading`,
:mod:`.placement`), tokenisation (:mod:`.tokens`), what a pass gives (:mod:`.results`),
generation (:mod:`.generation`), methods beyond raw weights (:mod:`.methods`), the
families' blocks (:mod:`.blocks`), per-architecture names (:mod:`.architectures`); rollout's
maths is in the engine (:mod:`attnviz.attention.rollout`).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

import torch
from torch import nn

from ..attention.cancellation import check_cancelled
from ..attention.engine import resolve_device
from ..attention.errors import AttentionInputError
from .architectures import ALIBI_TYPES, POSITIONS_AFTER_PADDING, block_named
from .blocks import BLOCKS, Block, Family
from .calls import AttentionRecording, WeightsRecording, eager_attention
from .computing import AttentionObserver
from .generation import GenerationMixin
from .placement import (
    Placement,
    home_device,
    layers_per_device,
    model_dtype,
    parameter_bytes,
    spread,
)
from .recorder import ablate_heads, observe_attention, record_attention, use_recorder
from .results import DecoderHead, PretrainedAttentions
from .tokens import TokenizedBatch, TokenizerMixin

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


WARM_UP_TEXT: Final = "Attention is all you need."
"""The short input :meth:`PretrainedModel.warm_up` runs through a text model."""


AttentionPath = Literal["recorded", "output_attentions"]
"""How a model's weights are obtained: "recorded" (transformers' attention interface, the
fused path: states kept, weights recomputed on demand, :mod:`.recorder`) or
"output_attentions" (the model's own eager weights, returned whole,
:class:`.calls.WeightsRecording`), for families whose modules bypass the interface."""


class ModelFormatError(ValueError):
    """A model AttnViz cannot load or show; the message names the file and what is missing."""


class UnrecordedError(ModelFormatError):
    """A pass recorded no attention call: the model's modules compute attention themselves."""


def _own_attention(model: nn.Module) -> tuple[str, bool]:
    """The model's attention module classes, listed, and whether it has an ALiBi bias."""
    modules = sorted(
        {type(m).__name__ for m in model.modules() if type(m).__name__.endswith("Attention")}
    )
    config = getattr(model, "config", None)
    alibi = getattr(config, "alibi", False) or getattr(config, "model_type", "") in ALIBI_TYPES
    return ", ".join(modules), bool(alibi)


def output_attentions_note(name: str, model: nn.Module) -> str:
    """What the response and the page say of a model drawn from its eager ``output_attentions``."""
    modules, alibi = _own_attention(model)
    feature = " (with its ALiBi position bias)" if alibi else ""
    return (
        f"{name}'s attention layers ({modules or type(model).__name__}) compute "
        f"attention themselves{feature}, not through transformers' attention interface, so "
        "the fused path is not available for this family: its maps are the model's own eager "
        "output_attentions, every layer held at once (shorter inputs than the fused path "
        "admits), and the methods that need queries, keys or values (neuron view, norm, "
        "value zeroing, gradients, heads off) are not available"
    )


def unrecorded_message(name: str, model: nn.Module) -> str:
    """Why a model whose attention layers called no attention function is refused."""
    modules, alibi = _own_attention(model)
    feature = " (its ALiBi position bias is computed inside them)" if alibi else ""
    return (
        f"{name} ({type(model).__name__}): its attention layers "
        f"({modules or 'none found'}) compute attention themselves{feature}, not "
        "through transformers' attention interface, so AttnViz cannot record or reproduce "
        "their weights and refuses the model rather than draw them wrong"
    )


def check_reproducible(recording: AttentionRecording) -> None:
    """Refuse a recording whose attention modules have no eager function to recompute with.

    Raises:
        ModelFormatError: naming the module class and its modeling file.
    """
    for call in recording.calls:
        try:
            eager_attention(call.module)
        except TypeError as error:
            raise ModelFormatError(
                f"AttnViz cannot reproduce this model's attention: {error}"
            ) from error


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
        attention_path_found: whether the warm-up ran and settled ``attention_path``
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
    def described(self) -> str:
        """The family with its article, for messages: "an encoder", "a decoder"."""
        return f"{'an' if self.family.startswith('e') else 'a'} {self.family}"

    @property
    def blocks(self) -> tuple[Block, ...]:
        """The attention blocks of the family (:data:`BLOCKS`)."""
        return BLOCKS[self.family]

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
        """Whether the model continues text (a decoder or an encoder-decoder)."""
        return self.family != "encoder"

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
        if self.family == "encoder-decoder" and block != "encoder":
            return _config_value(self.config, "num_decoder_layers", "decoder_layers") or (
                self.num_layers
            )
        return self.num_layers

    def block_heads(self, block: Block) -> int:
        """H of one block (BART's encoder and decoder may have different head counts)."""
        if self.family == "encoder-decoder":
            name = "encoder_attention_heads" if block == "encoder" else "decoder_attention_heads"
            return _config_value(self.config, name, "num_heads") or self.num_heads
        return self.num_heads


@dataclass
class PretrainedModel(TokenizerMixin, GenerationMixin, LoadedModel):
    """A loaded transformers text model and its tokenizer: tokenise, run while recording.

    Attributes (besides :class:`LoadedModel`'s):
        tokenizer: its tokenizer (with the chat template, when the model has one).
    """

    tokenizer: PreTrainedTokenizerBase = field(kw_only=True)
    modality: ClassVar[str] = "text"

    def warm_up(self) -> None:
        """One short input through the model once it is loaded (torch's lazy start-up).

        It also checks that every attention layer can be reproduced: each recorded call's
        module has an eager attention function AttnViz computes its weights with.

        A model whose pass records no call (its modules compute attention themselves)
        switches to its eager ``output_attentions`` (:attr:`attention_path`).

        Raises:
            ModelFormatError: the model's attention is not reproducible (a layer without
                ``eager_attention_forward``) and, for a model whose modules bypass the
                attention interface, its ``output_attentions`` gives no weights either;
                the message says which.
        """
        if self.attention_path_found:
            return
        warm = self.tokenize([WARM_UP_TEXT])
        targets = self.decoder_inputs([WARM_UP_TEXT]) if self.family == "encoder-decoder" else None
        try:
            check_reproducible(self.run(warm, targets, device="auto").recording)
        except UnrecordedError as error:
            # Its modules compute attention themselves (GPT-Neo, BLOOM): draw the model's
            # own eager output_attentions, when it returns them.
            self.attention_path = "output_attentions"
            try:
                self.run(warm, targets, device="auto")
            except ModelFormatError as again:
                self.attention_path = "recorded"
                raise ModelFormatError(f"{error}; {again}") from again
        self.attention_path_found = True

    def attention(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str | None] | None = None,
        *,
        chat: bool = False,
        targets: Sequence[str] | None = None,
        device: str = "auto",
    ) -> PretrainedAttentions:
        """Tokenise (:meth:`tokenize`) and run (:meth:`run`).

        Raises:
            AttentionInputError: as :meth:`tokenize` and :meth:`run`.
        """
        batch = self.tokenize(texts, text_pairs, chat=chat)
        return self.run(
            batch, None if targets is None else self.decoder_inputs(targets), device=device
        )

    def run(
        self,
        batch: TokenizedBatch,
        targets: TokenizedBatch | None = None,
        *,
        device: str = "auto",
        ablate: dict[int, tuple[int, ...]] | None = None,
        observer: AttentionObserver | None = None,
        record: bool = True,
    ) -> PretrainedAttentions:
        """One forward pass, recording every attention layer.

        Args:
            batch: from :meth:`tokenize` (the source, for an encoder-decoder).
            targets: an encoder-decoder's decoder input (:meth:`decoder_inputs`);
                required for that family, refused for the others.
            device: "auto" (CUDA when available), "cpu" or "cuda".
            ablate: heads switched off, ``id(attention module)`` -> query heads
                (:func:`.recorder.ablate_heads`), or None.
            observer: the layers it wants compute their weights during the pass and hand
                them over (:class:`.computing.AttentionObserver`), or None.
            record: keep every call's query, key and value states (for views computed
                after the pass); False keeps none (what the observer builds is the view).

        Returns:
            A :class:`PretrainedAttentions` (its recording empty without ``record``).

        Raises:
            AttentionInputError: (field ``device``) as
                :func:`attnviz.attention.engine.resolve_device`; (``targets``) missing for an
                encoder-decoder or given to another family.
            ModelFormatError: the model's attention layers do not go through
                transformers' attention interface (nothing was recorded).
        """
        run_on, model = self.placed_on(device)
        inputs = self.forward_inputs(batch, targets, run_on)
        if self.attention_path == "output_attentions":
            return self._run_output_attentions(
                model, batch, targets, inputs, run_on, ablate=ablate, observer=observer,
                record=record,
            )  # fmt: skip
        start = time.perf_counter()
        recording = AttentionRecording()
        with (
            torch.inference_mode(),
            record_attention(recording) if record else nullcontext(),
            ablate_heads(ablate),
            observe_attention(observer),
        ):
            _, decoder_head, final_hidden = self._forward(model, inputs)
            if run_on.type == "cuda":
                torch.cuda.synchronize(run_on)
        compute_ms = (time.perf_counter() - start) * 1000.0
        if record and not recording.calls:
            raise UnrecordedError(unrecorded_message(self.name, model))
        return PretrainedAttentions(
            batch=batch,
            targets=targets,
            recording=recording,
            block_calls=(
                self.block_calls(model, recording)
                if record
                else {b: list(range(self.block_layers(b))) for b in self.blocks}
            ),
            decoder_head=decoder_head,
            compute_ms=compute_ms,
            device=str(run_on),
            final_hidden=final_hidden,
        )

    def forward_inputs(
        self, batch: TokenizedBatch, targets: TokenizedBatch | None, device: torch.device
    ) -> dict[str, torch.Tensor]:
        """The keyword arguments of the model's forward pass for ``batch`` (and ``targets``).

        Raises:
            AttentionInputError: (field ``targets``) missing for an encoder-decoder or given
                to another family.
        """
        if (targets is None) == (self.family == "encoder-decoder"):
            raise AttentionInputError(
                "targets",
                "an encoder-decoder needs the decoder's text (targets)"
                if targets is None
                else f"targets are for encoder-decoders; {self.name} is {self.described}",
            )
        inputs: dict[str, torch.Tensor] = {
            "input_ids": batch.input_ids.to(device),
            "attention_mask": batch.attention_mask.to(device).long(),
        }
        if self.family == "encoder" and "token_type_ids" in self.forward_arguments:
            inputs["token_type_ids"] = batch.token_type_ids.to(device)
        if targets is not None:
            inputs["decoder_input_ids"] = targets.input_ids.to(device)
            inputs["decoder_attention_mask"] = targets.attention_mask.to(device).long()
        return inputs

    def _run_output_attentions(
        self,
        model: PreTrainedModel,
        batch: TokenizedBatch,
        targets: TokenizedBatch | None,
        inputs: dict[str, torch.Tensor],
        run_on: torch.device,
        *,
        ablate: dict[int, tuple[int, ...]] | None,
        observer: AttentionObserver | None,
        record: bool,
    ) -> PretrainedAttentions:
        """:meth:`run` for a model whose modules bypass the attention interface.

        One forward pass with ``output_attentions=True``: every layer's weights are the
        model's own eager ones, kept whole (:class:`.calls.WeightsRecording`) and handed
        to ``observer`` layer by layer after the pass.

        Raises:
            AttentionInputError: (field ``ablate``) heads to switch off: this path cannot.
            ModelFormatError: the model returned no weights (no path returns them).
        """
        if ablate:
            raise AttentionInputError(
                "ablate", f"heads off: {output_attentions_note(self.name, model)}"
            )
        start = time.perf_counter()
        with torch.inference_mode():
            outputs, decoder_head, final_hidden = self._forward(
                model, inputs, output_attentions=True
            )
            if self.family == "encoder-decoder":
                layers = {
                    "encoder": outputs.encoder_attentions,
                    "decoder": outputs.decoder_attentions,
                    "cross": outputs.cross_attentions,
                }
            else:
                layers = {self.blocks[0]: outputs.attentions}
            if run_on.type == "cuda":
                torch.cuda.synchronize(run_on)
        compute_ms = (time.perf_counter() - start) * 1000.0
        recording = WeightsRecording()
        block_calls: dict[Block, list[int]] = {}
        modules = self.attention_modules(model)
        for block in self.blocks:
            weights = layers.get(block)
            if not weights or any(w is None for w in weights):
                raise ModelFormatError(
                    f"{self.name}: its output_attentions returned no {block} weights either, "
                    "so no path gives AttnViz its attention"
                )
            block_calls[block] = []
            for layer, tensor in enumerate(weights):
                check_cancelled()
                module = modules.get(block, [])
                owner = module[layer] if len(module) == len(weights) else model
                if observer is not None and observer.wants(owner):
                    observer.take(0, int(tensor.shape[2]), tensor)
                    observer.layer_done()
                if record:
                    block_calls[block].append(len(recording.calls))
                    recording.add_weights(owner, tensor)
        del layers, outputs
        if not record:
            block_calls = {b: list(range(self.block_layers(b))) for b in self.blocks}
        return PretrainedAttentions(
            batch=batch,
            targets=targets,
            recording=recording,
            block_calls=block_calls,
            decoder_head=decoder_head,
            compute_ms=compute_ms,
            device=str(run_on),
            final_hidden=final_hidden,
        )

    def attention_modules(self, model: PreTrainedModel) -> dict[Block, list[nn.Module]]:
        """Each block's innermost attention modules (class names ending in "Attention"), in order.

        GPT-Neo's ``GPTNeoAttention`` wraps a ``GPTNeoSelfAttention``: the inner one is
        the layer's. An encoder-decoder's are split by their names (:meth:`block_of`).
        """
        found = [
            m
            for m in model.modules()
            if type(m).__name__.endswith("Attention")
            and not any(type(c).__name__.endswith("Attention") for c in m.modules() if c is not m)
        ]
        block = self.block_of(model)
        split: dict[Block, list[nn.Module]] = {}
        for module in found:
            split.setdefault(block(module), []).append(module)
        return split

    @functools.cached_property
    def forward_arguments(self) -> frozenset[str]:
        """The names of the model's forward arguments (``token_type_ids``, ``logits_to_keep``)."""
        import inspect

        return frozenset(inspect.signature(self.model.forward).parameters)

    def _forward(
        self, model: PreTrainedModel, inputs: dict[str, torch.Tensor], **options: Any
    ) -> tuple[Any, DecoderHead | None, torch.Tensor | None]:
        """One forward pass of the family (``options``: ``output_attentions``), no cache.

        Returns:
            The model's outputs; a decoder's (or encoder-decoder's) :class:`DecoderHead`,
            else None; an encoder's last hidden states (B, L, d_model) float32 on the CPU,
            else None.

        Raises:
            AttentionInputError: (field ``texts``) a token id or a position beyond the
                model's embeddings.
        """
        try:
            if self.family == "decoder":
                decoder_head, outputs = self._decode(model, inputs, **options)
                return outputs, decoder_head, None
            outputs = model(**inputs, use_cache=False, **options)
        except IndexError as error:  # an id or a position beyond an embedding's rows
            raise AttentionInputError(
                "texts",
                f"{self.name} cannot take this input ({error}): a token id beyond its "
                "vocabulary or more tokens than its positions",
            ) from error
        if self.family == "encoder":
            return outputs, None, outputs.last_hidden_state.float().cpu()
        # the logits (B, L_t, vocab): the targets' next tokens
        return outputs, DecoderHead(outputs.logits, nn.Identity()), None

    def _decode(
        self, model: PreTrainedModel, inputs: dict[str, torch.Tensor], **options: Any
    ) -> tuple[DecoderHead, Any]:
        """Run a decoder's backbone; its hidden states and output head for next tokens later.

        A model without a separate backbone and head runs whole: its logits become the
        "hidden states" of an identity head. Returns the head and the pass's outputs.
        """
        backbone = model.base_model
        head = model.get_output_embeddings()  # type: ignore[no-untyped-call]
        if backbone is model or head is None:
            outputs = model(**inputs, use_cache=False, **options)
            return DecoderHead(outputs.logits, nn.Identity()), outputs
        outputs = backbone(**inputs, use_cache=False, **options)
        return DecoderHead(outputs.last_hidden_state, head), outputs

    def block_calls(
        self, model: PreTrainedModel, recording: AttentionRecording
    ) -> dict[Block, list[int]]:
        """Split the recorded calls into the family's blocks by the modules that made them."""
        if self.family != "encoder-decoder":
            return {self.blocks[0]: list(range(len(recording.calls)))}
        block = self.block_of(model)
        split: dict[Block, list[int]] = {name: [] for name in self.blocks}
        for i, call in enumerate(recording.calls):
            split[block(call.module)].append(i)
        return split

    def block_of(self, model: PreTrainedModel) -> Callable[[nn.Module], Block]:
        """The block each attention module of ``model`` is in, by name (as :meth:`block_calls`)."""
        if self.family != "encoder-decoder":
            only = self.blocks[0]
            return lambda module: only
        names = {id(module): name for name, module in model.named_modules()}
        return lambda module: block_named(names.get(id(module), ""))

    def weight_cells(self, batch: TokenizedBatch, targets: TokenizedBatch | None = None) -> int:
        """Attention numbers of every block's maps for ``batch``: N * B * H * L_q * L_k, summed."""
        size, source = (int(n) for n in batch.input_ids.shape)
        target = source if targets is None else int(targets.input_ids.shape[1])
        areas = {"encoder": source * source, "decoder": target * target, "cross": target * source}
        if self.family == "decoder":
            areas["decoder"] = source * source
        return size * sum(
            self.block_layers(block) * self.block_heads(block) * areas[block]
            for block in self.blocks
        )
