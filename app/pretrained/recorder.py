"""AttnViz's attention function for transformers models, and the hooks it hands each call to.

``output_attentions`` materialises every layer's and head's weights at once: N * H * L**2
numbers (30 layers x 9 heads x 4096**2 float32 is 18 GB for SmolLM2 at 4096 tokens).
Instead, AttnViz registers its own function with transformers' ``AttentionInterface``
(https://huggingface.co/docs/transformers/attention_interface), :func:`recording_attention`.
It computes each layer's output with PyTorch's scaled_dot_product_attention, as the "sdpa"
implementation does, and hands the call (:class:`.calls.AttentionCall`) to the hooks
installed in the current context, one list (TransformerLens's hook points, for one
function). A hook can

- keep the call (:func:`record_attention`: any head's weights later, by the model's own
  eager attention on that head's slice, :mod:`.calls`);
- change it before it is computed (:func:`zero_values`, :func:`ablate_heads`);
- compute it itself, by the model's eager attention (:attr:`Hook.needs_eager`): in query
  chunks whose weights go to an observer (:func:`observe_attention`), or whole with its
  weights in the autograd graph and its heads gated (:func:`capture_gradients`);
- change its output (:func:`ablate_heads` zeroes the heads it switches off);
- keep what exact tiles of every map are recomputed from (:func:`keep_pass`: q, k and
  each row's log-sum-exp from the kernel that computed the layer, :mod:`.tiles`).

A new intervention is one :class:`Hook` and the context manager that installs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Final

import torch
from torch import nn

from ..attention.cancellation import check_cancelled
from .calls import AttentionCall, AttentionRecording, eager_attention
from .computing import (
    AttentionObserver,
    attention_with_lse,
    computed,
    observed_attention,
    replay_kept,
)
from .mask_rules import dense_mask, recorder_mask
from .tiles import KeptPass, kept_layer

RECORDER: Final = "attnviz_recorder"
"""The name AttnViz's attention function is registered under (``attn_implementation``)."""


@dataclass
class GradientCapture:
    """Each attention call's weights and head gates, in the autograd graph of a forward pass.

    Inside :func:`capture_gradients` every attention layer runs the model's own eager
    attention with autograd on (not SDPA), so that its softmax weights A (B, H, L_q, L_k)
    are a tensor of the graph, and multiplies each head's output by a gate ξ_h (Michel et
    al., NeurIPS 2019, "Are Sixteen Heads Really Better than One?", eq. 3): 1 for a head
    that is on, 0 for one :func:`ablate_heads` switched off. ``torch.autograd.grad(target,
    weights + gates)`` then gives ∂target/∂A and ∂target/∂ξ_h.

    Attributes:
        weights: A of each call, in the order the model ran them (layer 0 first).
        gates: ξ of each call, (H,) leaf tensors with ``requires_grad``.
    """

    weights: list[torch.Tensor] = field(default_factory=list)
    gates: list[torch.Tensor] = field(default_factory=list)


class Hook:
    """One thing done to the attention calls of the forward passes run while it is installed.

    :func:`recording_attention` hands each call to the installed hooks in the order they
    were installed. Each hook that :meth:`wants` the call (as the hooks before it left it)
    sees it :meth:`before` the layer is computed and may hand on a changed copy. The first
    of them that :attr:`needs_eager` computes the layer (:meth:`run`); without one, SDPA
    does (or the model's eager attention, where SDPA cannot: :func:`needs_eager`). Then
    each sees the output :meth:`after`, the last installed first, and may change it.

    Attributes:
        needs_eager: whether the hook computes the calls it wants itself (:meth:`run`), by
            the model's eager attention.
    """

    needs_eager: bool = False

    def wants(self, call: AttentionCall) -> bool:
        """Whether the hook acts on this call."""
        return True

    def before(self, call: AttentionCall) -> AttentionCall:
        """The call as the layer is to compute it (by default unchanged)."""
        return call

    def run(self, call: AttentionCall) -> torch.Tensor:
        """attn_output (B, L_q, H, d_v) of the call (hooks that :attr:`needs_eager`)."""
        raise NotImplementedError

    def after(self, call: AttentionCall, output: torch.Tensor) -> torch.Tensor:
        """The layer's attn_output (B, L_q, H, d_v) as handed on (by default unchanged)."""
        return output


_hooks: ContextVar[tuple[Hook, ...]] = ContextVar("attnviz_hooks", default=())


def recording_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The registered attention function: the call through the installed hooks (:class:`Hook`).

    Shapes as transformers passes them: query (B, H, L_q, d_k), key and value
    (B, H_kv, L_k, d_k), the mask (B, 1, L_q, L_k) or None.

    Returns:
        attn_output (B, L_q, H, d_v), as transformers' ``sdpa_attention_forward``, and no
        weights.
    """
    check_cancelled()  # between layers: a given-up request stops here
    call = AttentionCall(module, query, key, value, attention_mask, scaling, kwargs)
    wanted: list[Hook] = []
    for hook in _hooks.get():
        if hook.wants(call):
            call = hook.before(call)
            wanted.append(hook)
    runner = next((hook for hook in wanted if hook.needs_eager), None)
    output = runner.run(call) if runner is not None else computed(call, dropout)
    for hook in reversed(wanted):
        output = hook.after(call, output)
    return output, None


class _Recording(Hook):
    """Keeps every call, out of the autograd graph (:func:`record_attention`)."""

    def __init__(self, recording: AttentionRecording) -> None:
        self.recording = recording

    def before(self, call: AttentionCall) -> AttentionCall:
        self.recording.add(call.detached())
        return call


class _Ablation(Hook):
    """Switches heads off (:func:`ablate_heads`): their output zeroed after the layer."""

    def __init__(self, heads: dict[int, tuple[int, ...]]) -> None:
        self.heads = heads

    def wants(self, call: AttentionCall) -> bool:
        return bool(self.heads.get(id(call.module)))

    def before(self, call: AttentionCall) -> AttentionCall:
        return replace(call, heads_off=self.heads[id(call.module)])

    def after(self, call: AttentionCall, output: torch.Tensor) -> torch.Tensor:
        if not call.heads_off:  # gated by capture_gradients instead
            return output
        output = output.clone()  # (B, L_q, H, d_v): those heads add nothing to the projection
        output[:, :, list(call.heads_off)] = 0
        return output


class _ValueZeroing(Hook):
    """Zeroes one key token's value states per batch row in one module (:func:`zero_values`)."""

    def __init__(self, module: nn.Module, tokens: torch.Tensor) -> None:
        self.module, self.tokens = module, tokens

    def wants(self, call: AttentionCall) -> bool:
        return call.module is self.module

    def before(self, call: AttentionCall) -> AttentionCall:
        value = call.value.clone()  # row b loses token tokens[b]
        value[torch.arange(value.shape[0]), :, self.tokens.to(value.device)] = 0
        return replace(call, value=value)


class _Observation(Hook):
    """Computes the calls its observer wants in chunks, handing it their weights.

    With ``kept``, each call is kept for tiles instead (:class:`_Keeping`) and the observer
    is handed the kept layer's exact weights (:func:`.computing.replay_kept`); a layer
    tiles do not reproduce is observed by the model's eager attention, as without.
    """

    needs_eager = True

    def __init__(self, observer: AttentionObserver, kept: KeptPass | None = None) -> None:
        self.observer, self.kept = observer, kept

    def wants(self, call: AttentionCall) -> bool:
        return not call.heads_off and self.observer.wants(call.module)

    def run(self, call: AttentionCall) -> torch.Tensor:
        if self.kept is None:
            return observed_attention(self.observer, call)
        output, lse = attention_with_lse(call)
        layer = kept_layer(call, lse)
        self.kept.layers.append(layer)
        if layer.refusal is not None:
            return observed_attention(self.observer, call)
        replay_kept(self.observer, self.kept, len(self.kept.layers) - 1)
        return output


class _Keeping(Hook):
    """Computes every call with its rows' log-sum-exp and keeps it for tiles (:func:`keep_pass`)."""

    needs_eager = True

    def __init__(self, kept: KeptPass) -> None:
        self.kept = kept

    def wants(self, call: AttentionCall) -> bool:
        return self.kept.only is None or self.kept.only(call.module)

    def run(self, call: AttentionCall) -> torch.Tensor:
        output, lse = attention_with_lse(call)
        self.kept.layers.append(kept_layer(call, lse))
        return output


class _Gradients(Hook):
    """Computes every call with its weights in the graph and its heads gated (GradientCapture)."""

    needs_eager = True

    def __init__(self, capture: GradientCapture) -> None:
        self.capture = capture

    def before(self, call: AttentionCall) -> AttentionCall:
        # ξ_h = 0 for the heads switched off: the gate switches them off, not the ablation
        gate = torch.ones(call.num_heads, dtype=call.value.dtype, device=call.value.device)
        gate[list(call.heads_off)] = 0
        self.capture.gates.append(gate.requires_grad_(True))
        return replace(call, heads_off=())

    def run(self, call: AttentionCall) -> torch.Tensor:
        output, weights = eager_attention(call.module)(
            call.module, call.query, call.key, call.value, dense_mask(call.attention_mask),
            scaling=call.scaling, dropout=0.0, **call.kwargs,
        )  # fmt: skip
        if weights is None:
            raise RuntimeError(f"{type(call.module).__name__}'s eager attention gave no weights")
        self.capture.weights.append(weights)
        return output * self.capture.gates[-1][:, None]  # (B, L_q, H, d_v) by ξ (H, 1)


@contextmanager
def _installed(hook: Hook | None) -> Iterator[None]:
    """``hook`` added to the current context's list for the block (None adds nothing)."""
    if hook is None:
        yield
        return
    token = _hooks.set((*_hooks.get(), hook))
    try:
        yield
    finally:
        _hooks.reset(token)


def use_recorder(model: nn.Module) -> None:
    """Make ``model`` call :func:`recording_attention` in every attention layer.

    Registers the function (and transformers' eager mask builder, so that every layer
    gets an explicit (B, 1, L_q, L_k) mask rather than SDPA's implicit causal flag, with
    the rule it was built from attached: :func:`.mask_rules.recorder_mask`) under
    :data:`RECORDER`, then sets the model's ``attn_implementation`` to it. Every module
    of the model also checks, before it runs, whether its computation was given up
    (:func:`attnviz.attention.cancellation.check_cancelled`): a pass over 4,000 tokens
    then stops within one projection's time (a tenth of a second), not one layer's.

    Raises:
        ValueError: transformers' own, when the model's class does not support the
            attention interface.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(RECORDER, recording_attention)
    AttentionMaskInterface.register(RECORDER, recorder_mask)
    model.set_attn_implementation(RECORDER)  # type: ignore[operator]
    for module in model.modules():
        module.register_forward_pre_hook(_stop_if_cancelled)


def _stop_if_cancelled(module: nn.Module, args: Any) -> None:
    """A forward pre-hook: :func:`check_cancelled` before every module runs."""
    check_cancelled()


@contextmanager
def record_attention(
    recording: AttentionRecording | None = None,
) -> Iterator[AttentionRecording]:
    """Keep the attention calls of the forward passes run inside the block.

    The hooks are context-local (a ContextVar): forward passes in other threads or tasks
    are not mixed in. The model must have gone through :func:`use_recorder`.

    Args:
        recording: where the calls go (a :class:`.calls.StepwiseRecording` while
            generating); default a new :class:`.calls.AttentionRecording`.
    """
    recording = AttentionRecording() if recording is None else recording
    with _installed(_Recording(recording)):
        yield recording


@contextmanager
def ablate_heads(heads: dict[int, tuple[int, ...]] | None) -> Iterator[None]:
    """Switch heads off in the forward passes run inside the block (head ablation).

    Args:
        heads: ``id(attention module)`` -> the query heads whose output is zeroed before the
            output projection (Michel et al., NeurIPS 2019, "Are Sixteen Heads Really Better
            than One?", mask ξ_h = 0); None or empty switches nothing off.

    The heads' weights are still recorded: what they would have attended to.
    """
    with _installed(_Ablation(heads) if heads else None):
        yield


@contextmanager
def zero_values(module: nn.Module, tokens: torch.Tensor) -> Iterator[None]:
    """Zero one key token's value vector per batch row in ``module``'s attention (value zeroing).

    Args:
        module: the attention module whose calls are changed (others run as they are).
        tokens: (B,) int64: batch row b has key token ``tokens[b]``'s value states set to
            0 in every key/value head (Mohebbi et al., EACL 2023).
    """
    with _installed(_ValueZeroing(module, tokens)):
        yield


@contextmanager
def observe_attention(
    observer: AttentionObserver | None, kept: KeptPass | None = None
) -> Iterator[None]:
    """Hand the attention weights of the passes inside the block to ``observer``.

    See :class:`AttentionObserver`; None observes nothing. Calls with heads switched off
    (:func:`ablate_heads`, installed before) are not observed.

    Args:
        observer: what the weights go to.
        kept: keep the observed calls here for tiles as :func:`keep_pass` does, and hand
            the observer each kept layer's exact weights (the layer computed by SDPA's
            kernel with its LSE, not by eager attention in chunks).
    """
    with _installed(None if observer is None else _Observation(observer, kept)):
        yield


@contextmanager
def capture_gradients() -> Iterator[GradientCapture]:
    """Run the attention layers of the forward passes inside the block for a backward pass.

    See :class:`GradientCapture`; run the model with autograd on (not in
    ``torch.inference_mode``). Install it after :func:`ablate_heads`, whose heads it gates.
    """
    capture = GradientCapture()
    with _installed(_Gradients(capture)):
        yield capture


@contextmanager
def keep_pass(kept: KeptPass | None = None) -> Iterator[KeptPass]:
    """Keep, for exact tiles, every attention call of the forward passes run inside the block.

    Each call is computed with its rows' log-sum-exp (:func:`.computing.attention_with_lse`:
    SDPA's own kernel on the CPU, which returns it) and kept as a :class:`.tiles.KeptLayer`
    (q, k, the LSE, the score terms and the mask's rule; no value states, nothing
    L_q x L_k), checked against the model's eager attention on a few rows
    (:func:`.tiles.kept_layer`). Any block of any map is then :func:`.tiles.tile`.
    Install it after :func:`ablate_heads` (heads switched off still keep their q and k:
    what they would attend to); an observer installed with it is not handed the calls.

    Args:
        kept: where the layers go; default a new :class:`.tiles.KeptPass`.
    """
    kept = KeptPass() if kept is None else kept
    with _installed(_Keeping(kept)):
        yield kept
