"""What each attention layer of a transformers model received, and the recordings that keep it.

The recorder (:mod:`.recorder`) hands every attention call to its hooks as an
:class:`AttentionCall`: the query and key states (after rotary embeddings), the value
states, the mask the model built, the scaling and the other keyword arguments (a sliding
window, a softcap). A recording keeps the calls of a forward pass; the weights of any head
are computed from them afterwards, on demand, by the model's *own* eager attention on that
head's slice, so what is drawn is what the model's eager path computes. Memory grows as
N * L * d, not N * H * L**2 (``output_attentions``' every layer and head at once).

Grouped-query attention (Llama, Mistral, Qwen2, SmolLM2): H query heads share
H_kv key/value heads, query head h reading key/value head h // (H // H_kv)
(transformers' ``repeat_kv``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final

import torch
from torch import nn

from ..attention.cancellation import check_cancelled
from .mask_rules import dense_mask, is_rule_only, mask_rows

POSITION_BIAS: Final = "position_bias"
"""T5's relative position bias (B or 1, H, L_q, L_k), added to the scores before the mask."""

EagerAttention = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


@dataclass(frozen=True)
class AttentionCall:
    """What one attention layer received in one forward pass.

    Attributes:
        module: the model's attention module (its class says which eager function to use).
        query: (B, H, L_q, d_k) query states, after rotary embeddings where the model has them.
        key: (B, H_kv, L_k, d_k) key states (H_kv = H without grouped-query attention).
        value: (B, H_kv, L_k, d_v) value states, the value projection's bias included
            (d_v = d_k in every model here); the norm-based method reads them.
        attention_mask: the mask the model built, as given: (B, 1, L_q, L_k) additive
            float (0 to attend, the dtype's lowest to mask), or None.
        scaling: the factor the scores are multiplied by (usually d_k**-0.5), or None for
            the function's default.
        kwargs: the other keyword arguments of the call (``sliding_window``, ``softcap``, ...).
        heads_off: the query heads whose output the layer's computation zeroes before the
            output projection (head ablation, :func:`.recorder.ablate_heads`); their
            weights are still what they would attend to.
    """

    module: nn.Module
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attention_mask: torch.Tensor | None
    scaling: float | None
    kwargs: dict[str, Any]
    heads_off: tuple[int, ...] = ()

    def detached(self) -> AttentionCall:
        """The call with its tensors out of the autograd graph, kept as given otherwise."""
        mask = self.attention_mask
        return replace(
            self,
            query=self.query.detach(),
            key=self.key.detach(),
            value=self.value.detach(),
            attention_mask=mask if mask is None or is_rule_only(mask) else mask.detach(),
            kwargs=dict(self.kwargs),
        )

    @property
    def num_heads(self) -> int:
        """H, the query heads."""
        return int(self.query.shape[1])

    @property
    def num_key_value_heads(self) -> int:
        """H_kv, the key/value heads the query heads share."""
        return int(self.key.shape[1])

    @property
    def group_size(self) -> int:
        """How many query heads share each key/value head (H // H_kv)."""
        return self.num_heads // self.num_key_value_heads

    def query_heads(self, first: int, count: int) -> slice:
        """The query heads of key/value heads first .. first + count - 1.

        Raises:
            IndexError: key/value heads beyond H_kv (or none).
        """
        if not (first >= 0 and count >= 1 and first + count <= self.num_key_value_heads):
            raise IndexError(
                f"key/value heads {first}..{first + count - 1} are not in "
                f"0..{self.num_key_value_heads - 1}"
            )
        return slice(first * self.group_size, (first + count) * self.group_size)

    def key_value_head(self, head: int) -> int:
        """The key/value head that query head ``head`` reads (transformers' ``repeat_kv``)."""
        return head // self.group_size


@dataclass
class AttentionRecording:
    """The attention calls of the forward passes run inside :func:`record_attention`.

    Attributes:
        calls: one :class:`AttentionCall` per attention layer and forward pass, in the
            order the model ran them (layer 0 first).
    """

    calls: list[AttentionCall] = field(default_factory=list)

    def add(self, call: AttentionCall) -> None:
        """Keep one attention call (:func:`recording_attention` calls this)."""
        self.calls.append(call)

    def key_scale(self, layer: int) -> torch.Tensor | None:
        """What each key's weight is multiplied by in this recording's maps, else None.

        (B, H, 1, L_k) float32 for a recording whose maps are not the softmax weights
        themselves (norm-based attention's ‖f^h(x_j)‖); None here (the weights).
        """
        return None

    def head_weights(self, layer: int, head: int) -> torch.Tensor:
        """Softmax weights of one head, computed by the model's own eager attention.

        Args:
            layer: index into :attr:`calls`.
            head: query head, 0 <= head < H.

        Returns:
            (B, L_q, L_k) float32 on the CPU; rows sum to 1 (masked keys 0), as the
            model's ``output_attentions`` with ``attn_implementation="eager"``.

        Raises:
            IndexError: no such layer or head.
        """
        call = self.calls[layer]
        if not 0 <= head < call.num_heads:
            raise IndexError(f"head {head} is not in 0..{call.num_heads - 1}")
        return self.group_weights(layer, call.key_value_head(head))[:, head % call.group_size]

    def group_weights(
        self, layer: int, key_value_head: int, *, query: int | None = None
    ) -> torch.Tensor:
        """The weights of the query heads that share one key/value head.

        The model's eager attention runs on that group's slice: its query heads and
        their one key/value head, which the function repeats for them (``repeat_kv``),
        so each head's weights are computed once.

        Args:
            layer: index into :attr:`calls`.
            key_value_head: 0 <= key_value_head < H_kv.
            query: only this query position's row (its query and its row of the mask),
                L_q times less work; None for every row.

        Returns:
            (B, H // H_kv, L_q, L_k) float32 on the CPU (L_q = 1 with ``query``).

        Raises:
            IndexError: no such layer or key/value head.
        """
        return self.groups_weights(layer, key_value_head, 1, query=query)

    def groups_weights(
        self, layer: int, first: int, count: int, *, query: int | None = None
    ) -> torch.Tensor:
        """The weights of ``count`` consecutive groups from key/value head ``first``, in one call.

        As :meth:`group_weights` for key/value heads first .. first + count - 1 and their
        query heads: (B, count * H // H_kv, L_q, L_k) float32 on the CPU.

        Raises:
            IndexError: no such layer, or key/value heads beyond H_kv.
        """
        call = self.calls[layer]
        heads = call.query_heads(first, count)
        check_cancelled()
        if getattr(call.module, "sinks", None) is not None and count < call.num_key_value_heads:
            # the eager function reads every head's sink from the module: all heads at once
            every = self.groups_weights(layer, 0, call.num_key_value_heads, query=query)
            return every[:, heads]
        queries = call.query[:, heads]
        key = call.key[:, first : first + count]
        mask = call.attention_mask
        kwargs = dict(call.kwargs)
        bias = kwargs.get(POSITION_BIAS)
        if isinstance(bias, torch.Tensor) and bias.shape[1] > 1:  # (B or 1, H, L_q, L_k)
            kwargs[POSITION_BIAS] = bias[:, heads]
        if query is not None:
            queries = queries[:, :, query : query + 1]
            mask = mask_rows(mask, slice(query, query + 1))
            kwargs[POSITION_BIAS] = query_row(kwargs.get(POSITION_BIAS), query)
        else:
            mask = dense_mask(mask)
        if kwargs.get(POSITION_BIAS) is None:
            kwargs.pop(POSITION_BIAS, None)
        with torch.inference_mode():
            _, weights = eager_attention(call.module)(
                call.module,
                queries,
                key,
                key[..., :0],  # no value columns: the output, which is not used, is empty
                mask,
                scaling=call.scaling,
                dropout=0.0,
                **kwargs,
            )
        if weights is None:
            raise RuntimeError(f"{type(call.module).__name__}'s eager attention gave no weights")
        return weights.float().cpu()

    def layer_weights(self, layer: int, *, query: int | None = None) -> torch.Tensor:
        """Every head of one layer: (B, H, L_q, L_k) float32, as :meth:`head_weights`.

        With ``query``, that position's row only (L_q = 1), as :meth:`group_weights`.
        Each group is written into the result as it comes (no concatenation, which would
        hold every group twice: 1.2 GB for SmolLM2's layer at 4096 tokens).
        """
        call = self.calls[layer]
        size = call.group_size
        first = self.group_weights(layer, 0, query=query)
        if call.num_key_value_heads == 1:
            return first
        weights = torch.empty((first.shape[0], call.num_heads, *first.shape[2:]))
        weights[:, :size] = first
        del first
        for kv in range(1, call.num_key_value_heads):
            weights[:, kv * size : (kv + 1) * size] = self.group_weights(layer, kv, query=query)
        return weights


class WeightsRecording(AttentionRecording):
    """The weights a model's own eager attention returned (``output_attentions``), kept whole.

    For the families whose attention modules compute attention themselves instead of
    calling transformers' attention interface (GPT-Neo's local and global layers with
    their unscaled scores, BLOOM's ALiBi; found at load, when a warm-up pass records no
    call, :meth:`.model.PretrainedModel.warm_up`): nothing reaches the recorder, so the
    model runs with ``output_attentions=True`` and every layer's (B, H, L_q, L_k) weights
    are kept as float32 on the CPU, exactly what transformers returns. Each call then has
    no query, key or value states (their last axis is empty, the shapes only), no mask
    and no eager function: the views of the weights work, the methods that need the
    states (the neuron view, norm-based attention, value zeroing, gradients, head
    ablation) are refused before they run. Memory grows as N x H x L**2 (the
    admission's estimate decides how long an input may be).

    Attributes:
        weights: each call's (B, H, L_q, L_k) float32 weights, in the order of ``calls``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.weights: list[torch.Tensor] = []

    def add_weights(self, module: nn.Module, weights: torch.Tensor) -> None:
        """Keep one layer's weights (B, H, L_q, L_k), any dtype or device, as float32 on the CPU."""
        kept = weights.detach().float().cpu()
        size, heads, length_q, length_k = kept.shape
        self.calls.append(
            AttentionCall(
                module=module,
                query=kept.new_empty((size, heads, length_q, 0)),
                key=kept.new_empty((size, heads, length_k, 0)),
                value=kept.new_empty((size, heads, length_k, 0)),
                attention_mask=None,
                scaling=None,
                kwargs={},
            )
        )
        self.weights.append(kept)

    def groups_weights(
        self, layer: int, first: int, count: int, *, query: int | None = None
    ) -> torch.Tensor:
        """As :meth:`AttentionRecording.groups_weights`, sliced from the kept weights (a copy)."""
        call = self.calls[layer]
        heads = call.query_heads(first, count)
        check_cancelled()
        weights = self.weights[layer][:, heads]
        if query is not None:
            weights = weights[:, :, query : query + 1]
        return weights.clone()


class StepwiseRecording(AttentionRecording):
    """The recording of one causal pass over prompt + generated tokens, taken while generating.

    Generation runs the prompt in one pass, then each new token alone with the key/value
    cache; the caller marks the end of each forward pass (:meth:`end_pass`). The prompt's
    calls are kept whole; each later call keeps only what is new: its query row, the last
    key and value (the fed token's; the cache holds the others) and its row of the mask.
    :meth:`finish` concatenates them into the prompt's number of calls over every position,
    what one causal pass over the same tokens records, so the recorded pass costs no second
    forward. Rows equal that pass's to float rounding (the cache's keys are the same
    projections of the same states).

    A pass this cannot extend marks the recording :attr:`complete` False, and the caller
    runs the pass instead: a prompt call without a mask, a call with a position bias of its
    own, a step whose query is not one token, or a step whose calls are not the prompt's
    (a hybrid model whose passes differ). The other keyword arguments are the prompt's (a
    sliding window, a softcap, sinks: the same at every step; ``position_ids``, which the
    eager functions do not read).

    Attributes:
        complete: whether :meth:`finish` gives a faithful recording.
    """

    def __init__(self) -> None:
        super().__init__()
        self.complete = True
        self._steps: list[list[AttentionCall]] | None = None  # None during the prompt's pass
        self._current: list[AttentionCall] = []

    def add(self, call: AttentionCall) -> None:
        """The prompt's calls whole; later calls cut to what the fed token adds."""
        if call.kwargs.get(POSITION_BIAS) is not None or call.attention_mask is None:
            self.complete = False
        if self._steps is None:
            self.calls.append(call)
            return
        if call.query.shape[2] != 1:
            self.complete = False
        mask = call.attention_mask
        self._current.append(  # copies: a view would keep the whole key/value cache alive
            AttentionCall(
                module=call.module,
                query=call.query[:, :, -1:].clone(),
                key=call.key[:, :, -1:].clone(),
                value=call.value[:, :, -1:].clone(),
                attention_mask=None if mask is None else mask_rows(mask, slice(-1, None)).clone(),  # type: ignore[union-attr]
                scaling=call.scaling,
                kwargs={},
            )
        )

    def end_pass(self) -> None:
        """Mark the end of one forward pass: the prompt's, then each fed token's."""
        if self._steps is None:
            self._steps = []
            self.complete = self.complete and bool(self.calls)
            return
        modules = [call.module for call in self.calls]
        if [call.module for call in self._current] != modules:
            self.complete = False
        self._steps.append(self._current)
        self._current = []

    def finish(self) -> AttentionRecording:
        """The ``num_layers`` calls of one causal pass over every position.

        Raises:
            ValueError: not :attr:`complete`, or no prompt pass was recorded.
        """
        if not self.complete or self._steps is None or self._current:
            raise ValueError("the generation's calls cannot be joined into one pass")
        joined = AttentionRecording()
        masks: dict[int, torch.Tensor] = {}  # one joined mask per mask the layers shared
        firsts: list[AttentionCall | None] = list(self.calls)
        self.calls = []
        for layer in range(len(firsts)):
            first = firsts[layer]
            assert first is not None
            firsts[layer] = None  # its states are freed once joined: one layer held twice
            steps = [step[layer] for step in self._steps]
            mask = first.attention_mask
            if mask is None:
                raise ValueError("the prompt's pass had no mask")
            shared = mask.untyped_storage().data_ptr()  # each call's mask is its own view
            if shared in masks:
                full = masks[shared]
            else:
                full = masks[shared] = self._joined_mask(mask, steps)
            joined.add(
                AttentionCall(
                    module=first.module,
                    query=torch.cat([first.query, *(s.query for s in steps)], dim=2),
                    key=torch.cat([first.key, *(s.key for s in steps)], dim=2),
                    value=torch.cat([first.value, *(s.value for s in steps)], dim=2),
                    attention_mask=full,
                    scaling=first.scaling,
                    kwargs=first.kwargs,
                )
            )
            del first
        self._steps = []  # the pieces are in ``joined`` now
        return joined

    @staticmethod
    def _joined_mask(mask: torch.Tensor, steps: list[AttentionCall]) -> torch.Tensor:
        """The prompt's (…, L, L) mask and each step's row, as one (…, L + T, L + T) mask."""
        length = mask.shape[-1] + len(steps)
        full = torch.full(
            (*mask.shape[:-2], length, length),
            False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min,
            dtype=mask.dtype,
            device=mask.device,
        )
        prompt = mask.shape[-1]
        dense = dense_mask(mask)
        assert dense is not None
        full[..., :prompt, :prompt] = dense
        for i, step in enumerate(steps):
            assert step.attention_mask is not None
            row = step.attention_mask
            full[..., prompt + i : prompt + i + 1, : row.shape[-1]] = row
        return full


def eager_attention(module: nn.Module) -> EagerAttention:
    """The ``eager_attention_forward`` of the modeling file that defines ``module``.

    Raises:
        TypeError: that file has none (the weights cannot be recomputed).
    """
    modeling = importlib.import_module(type(module).__module__)
    function = getattr(modeling, "eager_attention_forward", None)
    if function is None:
        raise TypeError(
            f"{type(module).__name__} ({modeling.__name__}) has no eager_attention_forward: "
            "its weights cannot be recomputed"
        )
    return function  # type: ignore[no-any-return]


def query_row(tensor: torch.Tensor | None, query: int) -> torch.Tensor | None:
    """Row ``query`` of a (..., L_q, L_k) mask or bias; one broadcast over rows stays as is."""
    if tensor is None or tensor.shape[-2] == 1:
        return tensor
    return tensor[..., query : query + 1, :]
