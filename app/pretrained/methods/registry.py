"""Every method, described once: what it is, where it applies, its bounds and its computation.

A method says what the maps of a one-input view hold, or what is computed beside them:
the softmax weights ("attention"), Kobayashi et al.'s norm in their place ("norm"), or a
whole-model quantity next to the weights (rollout, flow, gradient-weighted rollout, head
importance, value zeroing). Each :class:`MethodSpec` holds its label and note (the page's
picker and text), its citation, the API's description, its rules (per head, one input
only, square blocks only, a gradient target, value states needed), the page's views that
draw it, its bounds (checked before anything runs) and its computation. The request
schema, the admission checks, the analysis, the page (``models-config``), the CLI and
:func:`attnviz.show` read it here; nothing else branches on a method's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final, Literal

import torch
from torch import nn

from ...attention.errors import AttentionInputError
from ...attention.rollout import MAX_ROLLOUT_TOKENS
from ..calls import WeightsRecording
from ..gradients import GradientPass, check_gradient_cells
from ..results import Memo
from ..zeroing import check_value_zeroing_work, value_zeroing
from .flow import flow_map
from .norm import MAX_SUMMED_NORM_TOKENS, NormRecording, output_projection

if TYPE_CHECKING:
    from ..blocks import Block
    from ..lengths import InputLengths
    from ..model import PretrainedModel
    from ..recordings import RecordingCache
    from ..results import PretrainedAttentions
    from ..tokens import TokenizedBatch

Method = Literal[
    "attention", "norm", "rollout", "flow", "grad_rollout", "head_importance", "value_zeroing"
]
"""What the maps hold: the softmax weights, Kobayashi et al.'s ‖α f(x)‖ in their place
("norm"), or the weights with another quantity beside them: attention rollout and flow
(Abnar & Zuidema), gradient-weighted rollout (Chefer et al.) and head importance (Michel et
al.; :mod:`..gradients`), value zeroing (Mohebbi et al.; :mod:`..zeroing`)."""


@dataclass(frozen=True)
class MethodRun:
    """What a method's computation is given, for one input (a :class:`..analysis.ViewPlan` run).

    Attributes:
        model: the model that ran.
        result: the recorded pass, its maps already the method's (:func:`with_method`).
        block: the block shown.
        batch: the one input (prompt + generated tokens); targets: an encoder-decoder's.
        recordings: the kept passes (a gradient pass is kept there too).
        device: "auto", "cpu" or "cuda".
        ablate: the heads switched off, as ``id(module)`` -> heads, else None.
        layer_index: the layer shown, else None.
        display_size: the side maps are pooled to, else None.
        target_index, target_token_id: a gradient method's target.
        pooled: pools a map to a side (:func:`..maps.pooled`'s first value).
        average_size: the side of the averages (:data:`..maps.MAX_AVERAGE_SIZE`).
    """

    model: PretrainedModel
    result: PretrainedAttentions
    block: Block
    batch: TokenizedBatch
    targets: TokenizedBatch | None
    recordings: RecordingCache
    device: str
    ablate: dict[int, tuple[int, ...]] | None
    layer_index: int | None
    display_size: int | None
    target_index: int | None
    target_token_id: int | None
    pooled: Callable[[torch.Tensor, int | None], torch.Tensor]
    average_size: int


@dataclass(frozen=True)
class MethodMaps:
    """What a method adds to a one-input response (each None when it adds nothing).

    Attributes:
        method_map: the method's own map: (1, L, L) flow or gradient rollout,
            (N, L_q, L_k) value zeroing; flow of a longer input than its bound, (1, W, W).
        method_window: (start, stop) the positions a windowed method_map covers (flow of
            an input over its bound: the last ones that fit), else None.
        summed_norm: with "norm" and layer_index, (1, P_q, P_k) the layer's ‖Σ_h α f(x)‖.
        gradients: a gradient method's backward pass (its target, head importance).
    """

    method_map: torch.Tensor | None = None
    summed_norm: torch.Tensor | None = None
    gradients: GradientPass | None = None
    method_window: tuple[int, int] | None = None


Bound = Callable[["PretrainedModel", "Block", int, "InputLengths", "int | None"], None]
"""A method's bound: (model, block, its layers, the input's lengths, layer_index) -> None,
or raise AttentionInputError naming ``texts``."""


def _note(lengths: InputLengths) -> str:
    """Said after the input's length: " with the new tokens" when generation adds some."""
    return " with the new tokens" if lengths.new_tokens else ""


@dataclass(frozen=True)
class MethodSpec:
    """One method, described once.

    Attributes:
        name: the API's name (:data:`Method`).
        label: the page's picker's name for it; None when the page does not offer it
            (rollout is drawn in every view already).
        note: what the page says of it under the picker (empty for the weights).
        citation: the paper it comes from (empty for the weights).
        description: the API's description of it (the request schema's ``method``).
        value_name: what one number of its maps is, in hovers and colour bars.
        per_head: its quantity replaces the weights in every layer's and head's maps.
        one_input: computed for one input (needs sequence_index).
        square_only: runs through square self-attention (not cross attention).
        gradient: needs a backward pass from a target (target_index, target_token_id).
        needs_states: needs more than the weights (value states, hooks inside the
            attention, a backward pass): refused for a model drawn from its
            ``output_attentions``.
        assumes_weights: not with neuron, hide_special_tokens or merge_words.
        views: the page's views that draw it (others ask for the weights); None: all.
        map_is_rollout: its ``method_map`` is the view's rollout (sent once, as
            ``rollout``, when the client does not ask for it by name).
        sends_head_importance: the response carries ``head_importance``.
        long_work: costs many passes at any length (a backward pass, a pass per token):
            the server runs it in the long computations' share of its pool.
        bound: its length bound (:data:`Bound`), checked before anything runs.
        compute: what it adds to a response (:class:`MethodMaps`), after the pass.
    """

    name: Method
    label: str | None
    note: str
    citation: str
    description: str
    value_name: str = "weight"
    per_head: bool = False
    one_input: bool = False
    square_only: bool = False
    gradient: bool = False
    needs_states: bool = False
    assumes_weights: bool = True
    views: tuple[str, ...] | None = None
    map_is_rollout: bool = False
    sends_head_importance: bool = False
    long_work: bool = False
    bound: Bound | None = None
    compute: Callable[[MethodRun], MethodMaps] | None = None

    @property
    def observable(self) -> bool:
        """Whether its view can be built during the forward pass.

        So for the plain weights: nothing computed after the pass, nothing in their place.
        """
        return self.compute is None and not self.per_head and not self.map_is_rollout


def _rollout_bound(
    model: PretrainedModel, block: Block, layers: int, lengths: InputLengths,
    layer_index: int | None,
) -> None:  # fmt: skip
    len_q = lengths.queries(block)
    if len_q > MAX_ROLLOUT_TOKENS:
        raise AttentionInputError(
            "texts",
            f"rollout is computed up to {MAX_ROLLOUT_TOKENS} tokens and this input has "
            f"{len_q}{_note(lengths)}",
        )


def _norm_bound(
    model: PretrainedModel, block: Block, layers: int, lengths: InputLengths,
    layer_index: int | None,
) -> None:  # fmt: skip
    len_q = lengths.queries(block)
    if layer_index is not None and len_q > MAX_SUMMED_NORM_TOKENS:
        raise AttentionInputError(
            "texts",
            f"summed_norm is computed up to {MAX_SUMMED_NORM_TOKENS} tokens and this input has "
            f"{len_q}{_note(lengths)}: send method 'norm' without layer_index, or a shorter text",
        )


def _zeroing_bound(
    model: PretrainedModel, block: Block, layers: int, lengths: InputLengths,
    layer_index: int | None,
) -> None:  # fmt: skip
    check_value_zeroing_work(layers, lengths.queries(block), lengths.keys(block), _note(lengths))


def _gradient_bound(
    model: PretrainedModel, block: Block, layers: int, lengths: InputLengths,
    layer_index: int | None,
) -> None:  # fmt: skip
    check_gradient_cells(model, lengths.total, lengths.target)


def _summed_norm(run: MethodRun) -> MethodMaps:
    """Layer layer_index's ‖Σ_h α_ij^h f^h(x_j)‖, pooled as the head means."""
    if run.layer_index is None:
        return MethodMaps()
    recording = run.result.recording
    assert isinstance(recording, NormRecording)
    call = run.result.block_calls[run.block][run.layer_index]
    return MethodMaps(summed_norm=run.pooled(recording.summed_norm(call), run.display_size))


def _flow(run: MethodRun) -> MethodMaps:
    flow, start = flow_map(run.result, run.block)
    stop = start + int(flow.shape[-1])
    return MethodMaps(method_map=flow, method_window=(start, stop) if start else None)


def _gradient_pass(run: MethodRun) -> GradientPass:
    return run.recordings.gradients(
        run.model,
        run.batch,
        run.targets,
        position=run.target_index,
        token_id=run.target_token_id,
        device=run.device,
        ablate=run.ablate,
    )


def _grad_rollout(run: MethodRun) -> MethodMaps:
    gradients = _gradient_pass(run)
    rollout = run.pooled(gradients.rollout(run.block), run.average_size)
    return MethodMaps(method_map=rollout, gradients=gradients)


def _head_importance(run: MethodRun) -> MethodMaps:
    return MethodMaps(gradients=_gradient_pass(run))


def _value_zeroing(run: MethodRun) -> MethodMaps:
    kept = run.result.memo.value_zeroing
    if run.block not in kept:
        kept[run.block] = value_zeroing(
            run.model, run.result, run.block, device=run.device, ablate=run.ablate
        )
    return MethodMaps(method_map=kept[run.block])


GRADIENT_NOTE: Final = (
    " The target T is a decoder's next-token logit at the Target token (its most likely "
    "next token; by default the last token that is neither special nor whitespace), or an "
    "encoder's output at the Target token along the input's mean output (the sentence "
    "embedding; by default the first token). "
    "It takes one more forward and backward pass with eager attention, for inputs up to "
    "2^27 attention weights over all layers and heads."
)
"""Said of both gradient methods on the page, after their own note."""

GRADIENT_TARGET: Final = (
    "The target T of both (see `target`): a decoder's or encoder-decoder's next-token logit "
    "of target_token_id at target_index (default the last token that is neither special "
    "nor whitespace, and its most likely next token); an encoder's <h_p, e> / ||e|| at "
    "p = target_index (default 0), token p's last "
    "hidden state along the input's mean last hidden state e (held fixed). Both take one "
    "more forward and backward pass with eager attention, up to N x H x L_q x L_k = 2^27 "
    "weights (704 tokens of SmolLM2, 965 of MiniLM; more is a 422 naming texts)."
)

METHODS: Final[dict[str, MethodSpec]] = {
    spec.name: spec
    for spec in (
        MethodSpec(
            "attention",
            "attention weights",
            "",
            "",
            "'attention': the softmax weights (rows sum to 1).",
            assumes_weights=False,
        ),
        MethodSpec(
            "norm",
            "norm ‖α f(x)‖ (Kobayashi 2020)",
            "Norm-based attention (Kobayashi et al., EMNLP 2020, “Attention is Not Only a "
            "Weight”): every map holds ‖α_ij f(x_j)‖, f(x) = (x W_V + b_V) W_O^h, the weight "
            "times the length of what key token j's value vector carries through this head "
            "into the output. Rows no longer sum to 1; there is no rollout, and hiding "
            "special tokens and merging words are off (they renormalise weights).",
            "Kobayashi, Kuribayashi, Yokoi and Inui, “Attention is Not Only a Weight: "
            "Analyzing Transformers with Vector Norms”, EMNLP 2020",
            "'norm': norm-based attention (Kobayashi et al., EMNLP 2020, 'Attention is Not "
            "Only a Weight'): ||alpha_ij^h f^h(x_j)|| with f^h(x) = (x W_V^h + b_V^h) W_O^h, "
            "the value vector carried through head h's slice of the output projection; same "
            "shapes and options, rows no longer summing to 1, no rollout. With layer_index it "
            "adds `summed_norm`, the layer's ||sum_h alpha_ij^h f^h(x_j)|| (inputs up to "
            "1024 tokens).",
            value_name="‖α f(x)‖",
            per_head=True,
            needs_states=True,
            bound=_norm_bound,
            compute=_summed_norm,
        ),
        MethodSpec(
            "rollout",
            None,
            "",
            "Abnar and Zuidema, “Quantifying Attention Flow in Transformers”, ACL 2020",
            "'rollout': the maps stay the weights and `method_map` is attention rollout "
            "(Abnar & Zuidema 2020, the `rollout` field).",
            square_only=True,
            map_is_rollout=True,
            bound=_rollout_bound,
        ),
        MethodSpec(
            "flow",
            "attention flow (Abnar & Zuidema 2020)",
            "Attention flow (Abnar & Zuidema, ACL 2020, “Quantifying Attention Flow in "
            "Transformers”): the layers as a network whose capacities are the head averages "
            "plus the residual connection, 0.5 · A + 0.5 · I as in rollout; row i of the map "
            "is the maximum flow from each input token to token i after the last layer, "
            "divided by the row's sum. It is in the Averages view beside rollout; the other "
            "views show the weights. It solves L² max-flow problems, so a longer input's flow "
            "is of its last tokens that fit (24 for a 30-layer model), among themselves.",
            "Abnar and Zuidema, “Quantifying Attention Flow in Transformers”, ACL 2020",
            "'flow': attention flow (Abnar & Zuidema, ACL 2020): the maps stay the weights "
            "and `method_map` holds the (1, L, L) maximum flow from each input token to each "
            "token after the last layer, through the residual-adjusted head means (0.5 A + "
            "0.5 I, as rollout), each row divided by its sum; with sequence_index, not for "
            "cross attention. It solves L^2 max-flow problems, so up to N * L^4 <= 1e7 (35 "
            "tokens through 6 layers, 24 through 30): a longer input's flow is of its last "
            "tokens that fit, among themselves, (1, W, W), with `method_window` [start, "
            "stop) saying which.",
            one_input=True,
            square_only=True,
            views=("averages",),
            compute=_flow,
        ),
        MethodSpec(
            "grad_rollout",
            "gradient-weighted rollout (Chefer 2021)",
            "Gradient-weighted attention rollout (Chefer, Gur & Wolf, ICCV 2021): per layer "
            "Ā = mean over heads of (∂T/∂A ⊙ A)⁺, the weights that push the target up, then "
            "R = I and R ← R + Ā · R through the layers. The Averages view draws R − I (the "
            "identity is each token's own residual): row i is how much each input token "
            "matters to the target through token i. The other views show the weights."
            + GRADIENT_NOTE,
            "Chefer, Gur and Wolf, “Generic Attention-model Explainability for Interpreting "
            "Bi-Modal and Encoder-Decoder Transformers”, ICCV 2021",
            "'grad_rollout': gradient-weighted attention rollout (Chefer, Gur and Wolf, ICCV "
            "2021, eq. 5-6): per layer A_bar = mean over heads of (dT/dA * A)^+, then R = I "
            "and R <- R + A_bar R, first layer first, in `method_map` (1, L, L), not "
            "normalised (R[i, j] >= 0 is token j's relevance to token i for the target T; the "
            "diagonal holds the identity); not for cross attention.",
            one_input=True,
            square_only=True,
            gradient=True,
            needs_states=True,
            views=("averages", "generation"),
            long_work=True,
            bound=_gradient_bound,
            compute=_grad_rollout,
        ),
        MethodSpec(
            "head_importance",
            "head importance (Michel 2019)",
            "Head importance (Michel, Levy & Neubig, NeurIPS 2019, “Are Sixteen Heads Really "
            "Better than One?”): each head's output is multiplied by a gate ξ = 1, and "
            "|∂T/∂ξ| is how much the target T would change, to first order, if that head "
            "were switched off (for a head already off, on). The model view draws it as a "
            "layers × heads grid under the thumbnails; a click on a cell enlarges that head."
            + GRADIENT_NOTE,
            "Michel, Levy and Neubig, “Are Sixteen Heads Really Better than One?”, NeurIPS 2019",
            "'head_importance': Michel et al. (NeurIPS 2019) |dT/d xi_h| for a gate xi_h on "
            "each head's output (1 on, 0 for heads in ablate), in `head_importance` (N, H) "
            "for the block. " + GRADIENT_TARGET,
            one_input=True,
            gradient=True,
            needs_states=True,
            views=("model",),
            sends_head_importance=True,
            long_work=True,
            bound=_gradient_bound,
            compute=_head_importance,
        ),
        MethodSpec(
            "value_zeroing",
            "value zeroing (Mohebbi 2023)",
            "Value zeroing (Mohebbi, Zuidema, Chrupała & Alishahi, EACL 2023, “Quantifying "
            "Context Mixing in Transformers”): in the chosen layer, token j's value vector "
            "is set to zero in every head and the layer run again; cell (i, j) is how far "
            "token i's output of the layer moves (1 − cosine similarity), each row divided "
            "by its sum. Unlike the weights it counts the whole layer: the value vectors, "
            "the output projection, the residual connection, the normalisation and the "
            "feed-forward network. The Averages view draws it beside the layer's head "
            "average; the other views show the weights. The layer is run once per token, so "
            "it is computed for short inputs only.",
            "Mohebbi, Zuidema, Chrupała and Alishahi, “Quantifying Context Mixing in "
            "Transformers”, EACL 2023",
            "'value_zeroing': value zeroing (Mohebbi et al., EACL 2023): in each layer of "
            "the block, key token j's value vector is zeroed in every head and the layer "
            "rerun; C_ij = 1 - cos(x_i without j, x_i) of the layer's outputs, each row "
            "divided by its sum, in `method_map` (N, L_q, L_k); up to N x L_q x L_k = 2^17 "
            "(147 tokens of MiniLM, 66 of SmolLM2; more is a 422 naming texts).",
            one_input=True,
            needs_states=True,
            views=("averages",),
            long_work=True,
            bound=_zeroing_bound,
            compute=_value_zeroing,
        ),
    )
}
"""Every method by name, in the page's order."""

METHOD_LABELS: Final[dict[str, str]] = {
    name: spec.label for name, spec in METHODS.items() if spec.label is not None
}
"""The methods the /models page offers, in its order, as its picker names them (rollout is
drawn in every view already, so it is not offered as a method of its own)."""

GRADIENT_METHODS: Final = frozenset(name for name, spec in METHODS.items() if spec.gradient)
"""Methods that need a backward pass from a target (:func:`..gradients.gradient_pass`)."""

PER_HEAD_METHODS: Final = frozenset(name for name, spec in METHODS.items() if spec.per_head)
"""Methods whose quantity replaces the weights in every layer's and head's maps."""

ONE_INPUT_METHODS: Final = frozenset(name for name, spec in METHODS.items() if spec.one_input)
"""Methods computed for one input, so needing sequence_index."""

DRAWN_METHODS: Final = tuple(
    name for name, spec in METHODS.items() if spec.per_head or not spec.assumes_weights
)
"""Methods whose quantity is every layer's and head's maps: the weights (first: the
default) and the per-head methods (what :func:`attnviz.show` and ``attnviz export`` draw)."""

STATE_METHODS: Final = frozenset(name for name, spec in METHODS.items() if spec.needs_states)
"""Methods that need more than the weights (value states, hooks inside the attention, a
backward pass through it): refused for a model drawn from its ``output_attentions``."""


def method_spec(method: str) -> MethodSpec:
    """The :class:`MethodSpec` of ``method``.

    Raises:
        AttentionInputError: (field ``method``) no such method.
    """
    if method not in METHODS:
        raise AttentionInputError(
            "method", f"{method!r}: the methods are {', '.join(repr(m) for m in METHODS)}"
        )
    return METHODS[method]


def method_description() -> str:
    """The request schema's description of ``method``: every method's, then the rules."""
    one_input = ", ".join(repr(name) for name in METHODS if METHODS[name].one_input)
    return (
        "What the maps hold. "
        + " ".join(spec.description for spec in METHODS.values())
        + f" {one_input} need sequence_index. Methods other than 'attention' are not with "
        "neuron, hide_special_tokens or merge_words (they assume weights)."
    )


def page_methods() -> list[dict[str, object]]:
    """What the /models page knows of each method it offers (``models-config``)."""
    return [
        {
            "name": spec.name,
            "label": spec.label,
            "note": spec.note,
            "citation": spec.citation,
            "value_name": spec.value_name,
            "per_head": spec.per_head,
            "gradient": spec.gradient,
            "assumes_weights": spec.assumes_weights,
            "views": None if spec.views is None else list(spec.views),
        }
        for spec in METHODS.values()
        if spec.label is not None
    ]


def check_method_bounds(
    model: PretrainedModel,
    method: str,
    block: Block,
    lengths: InputLengths,
    *,
    layers: int,
    layer_index: int | None,
) -> None:
    """Refuse an input longer than ``method`` computes (422 naming texts), before it runs.

    Raises:
        AttentionInputError: (field ``texts``) over the method's bound.
    """
    bound = method_spec(method).bound
    if bound is not None:
        bound(model, block, layers, lengths, layer_index)


def with_method(result: PretrainedAttentions, root: nn.Module, method: str) -> PretrainedAttentions:
    """``result`` whose maps hold ``method``'s quantity (itself but for a per-head method).

    The recorded pass is shared, not copied; the derived maps kept for later views
    (``memo``) are kept per method.

    Args:
        result: a recorded forward pass.
        root: the model that ran it (where the output projections are).
        method: any :data:`Method` (only "norm" replaces the weights).

    Raises:
        AttentionInputError: (field ``method``) a layer without a known output projection,
            or a pass drawn from ``output_attentions`` (no value states).
    """
    if not method_spec(method).per_head:  # the maps stay the weights (and rollout with them)
        return result
    if isinstance(result.recording, WeightsRecording):
        raise AttentionInputError(
            "method",
            f"method {method!r} needs the value states, and this model's attention modules "
            "compute attention themselves (its maps are its output_attentions): the fused "
            "path is not available for this family",
        )
    if method not in result.memo.methods:
        calls = result.recording.calls
        projections = {
            i: output_projection(root, call.module, call.num_heads * call.value.shape[-1])
            for i, call in enumerate(calls)
        }
        norm = NormRecording(calls=calls, projections=projections)
        result.memo.methods[method] = (norm, Memo())
    recording, memo = result.memo.methods[method]
    return replace(result, recording=recording, memo=memo, method=method)
