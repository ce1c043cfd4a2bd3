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
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final

import torch
from torch import nn

from ..attention.cancellation import check_cancelled
from ..attention.errors import AttentionInputError
from .architectures import ALIBI_TYPES, block_named
from .blocks import Block
from .calls import AttentionRecording, WeightsRecording, eager_attention
from .computing import AttentionObserver
from .generation import GenerationMixin
from .loaded import AttentionPath as AttentionPath
from .loaded import LoadedModel as LoadedModel
from .loaded import ModelFormatError as ModelFormatError
from .recorder import ablate_heads, keep_pass, observe_attention, record_attention
from .results import DecoderHead, PretrainedAttentions
from .tiles import KeptPass, TileError
from .tokens import TokenizedBatch, TokenizerMixin

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


WARM_UP_TEXT: Final = "Attention is all you need."
"""The short input :meth:`PretrainedModel.warm_up` runs through a text model."""


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
        targets = self.decoder_inputs([WARM_UP_TEXT]) if self.spec.targets else None
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
        keep: bool = False,
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
            keep: keep each call for exact tiles (:func:`.recorder.keep_pass`: q, k and
                each row's log-sum-exp, :attr:`PretrainedAttentions.kept`); an observer
                given with it is handed each kept layer's weights.

        Returns:
            A :class:`PretrainedAttentions` (its recording empty without ``record``).

        Raises:
            AttentionInputError: (field ``device``) as
                :func:`attnviz.attention.engine.resolve_device`; (``targets``) missing for an
                encoder-decoder or given to another family.
            ModelFormatError: the model's attention layers do not go through
                transformers' attention interface (nothing was recorded).
            TileError: ``keep`` for a model whose modules compute attention themselves
                (no q or k reaches AttnViz; its class named).
        """
        run_on, model = self.placed_on(device)
        inputs = self.forward_inputs(batch, targets, run_on)
        if self.attention_path == "output_attentions":
            if keep:
                raise TileError(f"tiles: {output_attentions_note(self.name, model)}")
            return self._run_output_attentions(
                model, batch, targets, inputs, run_on, ablate=ablate, observer=observer,
                record=record,
            )  # fmt: skip
        start = time.perf_counter()
        recording = AttentionRecording()
        block = self.block_of(model)
        # Kept for tiles alone, only the blocks' calls are kept (not a vision-language
        # model's image encoder's); beside a recording, every call, so that the two count
        # the calls alike (PretrainedAttentions.replay indexes both by the recording's).
        only = None if record else (lambda module: block(module) is not None)
        kept = KeptPass(only=only) if keep else None
        with (
            torch.inference_mode(),
            record_attention(recording) if record else nullcontext(),
            ablate_heads(ablate),
            # the observer's calls first (kept as it is handed them), then the others
            observe_attention(observer, kept),
            keep_pass(kept) if kept is not None else nullcontext(),
        ):
            _, decoder_head, final_hidden = self._forward(model, inputs)
            if run_on.type == "cuda":
                torch.cuda.synchronize(run_on)
        compute_ms = (time.perf_counter() - start) * 1000.0
        if record and not recording.calls:
            raise UnrecordedError(unrecorded_message(self.name, model))
        if record:
            block_calls = self.block_calls(model, recording)
        elif kept is not None:
            block_calls = self.block_calls(model, kept)
        else:
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
            kept=kept,
        )

    def forward_inputs(
        self, batch: TokenizedBatch, targets: TokenizedBatch | None, device: torch.device
    ) -> dict[str, torch.Tensor]:
        """The keyword arguments of the model's forward pass for ``batch`` (and ``targets``).

        Raises:
            AttentionInputError: (field ``targets``) missing for an encoder-decoder or given
                to another family.
        """
        if (targets is None) == self.spec.targets:
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
        if self.spec.text_pairs and "token_type_ids" in self.forward_arguments:
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
            layers = {
                block: getattr(outputs, name, None)
                for block, name in self.spec.output_attentions.items()
            }
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
            name = block(module)
            if name is not None:
                split.setdefault(name, []).append(module)
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
            if self.spec.outputs == "next-token":
                decoder_head, outputs = self._decode(model, inputs, **options)
                return outputs, decoder_head, None
            outputs = model(**inputs, use_cache=False, **options)
        except IndexError as error:  # an id or a position beyond an embedding's rows
            raise AttentionInputError(
                "texts",
                f"{self.name} cannot take this input ({error}): a token id beyond its "
                "vocabulary or more tokens than its positions",
            ) from error
        if self.spec.outputs == "hidden":
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
        self, model: PreTrainedModel, recording: AttentionRecording | KeptPass
    ) -> dict[Block, list[int]]:
        """Split the recorded (or kept) calls into the family's blocks by their modules.

        A call of a module in no block (a vision-language model's image encoder) is left out.
        """
        if isinstance(recording, AttentionRecording):
            modules = [call.module for call in recording.calls]
        else:
            modules = [layer.module for layer in recording.layers]
        block = self.block_of(model)
        split: dict[Block, list[int]] = {name: [] for name in self.blocks}
        for i, module in enumerate(modules):
            name = block(module)
            if name is not None:
                split[name].append(i)
        return split

    def block_of(self, model: PreTrainedModel) -> Callable[[nn.Module], Block | None]:
        """The block each attention module of ``model`` is in, by name (as :meth:`block_calls`).

        None for a module in no block.
        """
        if len(self.blocks) == 1:
            only = self.blocks[0]
            return lambda module: only
        names = {id(module): name for name, module in model.named_modules()}
        return lambda module: block_named(names.get(id(module), ""))

    def weight_cells(self, batch: TokenizedBatch, targets: TokenizedBatch | None = None) -> int:
        """Attention numbers of every block's maps for ``batch``: N * B * H * L_q * L_k, summed."""
        size, source = (int(n) for n in batch.input_ids.shape)
        target = source if targets is None else int(targets.input_ids.shape[1])
        # a decoder's block reads the input itself (no targets: target is source)
        areas = {"encoder": source * source, "decoder": target * target, "cross": target * source}
        return size * sum(
            self.block_layers(block) * self.block_heads(block) * areas[block]
            for block in self.blocks
        )
