"""Gradient methods: which attention a model's output depends on, by autograd.

Both run one more forward pass, with autograd on and every attention layer computed by
the model's own eager attention (:func:`.recorder.capture_gradients`), then one backward
pass from a scalar *target*:

- a decoder's (and an encoder-decoder's) next-token **logit** of ``token_id`` at query
  position ``position`` (by default the last token that is neither special nor
  whitespace, :func:`last_content_position`, and the model's most likely next token);
- an encoder's **embedding** score at ``position`` (default 0: [CLS] or <s>):
  ⟨h_position, ē⟩ / ‖ē‖, the component of that token's last hidden state along the
  input's sentence embedding ē (the mean of the last hidden states, as sentence-transformers
  pools MiniLM), ē held fixed. An encoder without a task head has no logit to explain,
  and the plain norm ‖h_position‖ is no target for most encoders: their last operation is
  a LayerNorm, which makes that norm nearly constant (its gradients vanish, 1e-11 for a
  BERT), while its component along a fixed direction moves with what the token took in.

Gradient-weighted attention rollout (Chefer, Gur and Wolf, "Generic Attention-model
Explainability for Interpreting Bi-Modal and Encoder-Decoder Transformers", ICCV 2021,
eq. 5-6; ``avg_heads`` and ``apply_self_attention_rules`` in their
Transformer-MM-Explainability code): for each layer, Ā = E_h[(∇A ⊙ A)^+], the head mean
of the positive part of gradient times weights, and R ← R + Ā R from R = I, first layer
first. Rows of R are not normalised: R[i, j] ≥ 0 is the relevance of input token j to
token i for the target, with the identity (each token's own residual) on the diagonal.

Head importance (Michel, Levy and Neubig, "Are Sixteen Heads Really Better than One?",
NeurIPS 2019, eq. 3-4): each head's output is multiplied by a gate ξ_h = 1 (0 for a head
switched off), and I_h = |∂target/∂ξ_h| is the first-order change of the target if the
head were switched off (or, for a head already off, on). The paper averages over a
dataset and, for pruning, normalises each layer by its ℓ2 norm; here it is one input and
unnormalised, so layers compare.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import torch

from ..attention.errors import AttentionInputError
from .recorder import ablate_heads, capture_gradients, record_attention

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from .blocks import Block
    from .model import PretrainedModel
    from .tokens import TokenizedBatch

MAX_GRADIENT_CELLS: Final = 2**27
"""The most attention weights (N x H x L_q x L_k over every block) a gradient pass keeps in
its autograd graph: 134 M float32, 0.5 GB, held about three times (weights, scores and
their gradients). SmolLM2 (30 x 9 heads) reaches it at 704 tokens, MiniLM (12 x 12) at
965."""


@dataclass(frozen=True)
class GradientTarget:
    """The scalar the gradients are taken of.

    Attributes:
        kind: "logit" (decoders, encoder-decoders) or "embedding" (encoders).
        position: the output position: a decoder's token, an encoder-decoder's target
            token, an encoder's token.
        token_id: the next token whose logit it is (None for "embedding").
        value: the target's value in the forward pass (a logit, or an embedding score).
    """

    kind: str
    position: int
    token_id: int | None
    value: float


@dataclass(frozen=True)
class GradientPass:
    """What one backward pass from a target gave, per attention call.

    Attributes:
        target: what was differentiated.
        relevance: per call, Ā = E_h[(∇A ⊙ A)^+]: (L_q, L_k) float32 on the CPU.
        importance: per call, |∂target/∂ξ_h|: (H,) float32 on the CPU.
        block_calls: the calls of each block, layer 0 first (as
            :attr:`.results.PretrainedAttentions.block_calls`).
        compute_ms: wall time of the forward and backward passes, in ms.
    """

    target: GradientTarget
    relevance: list[torch.Tensor]
    importance: list[torch.Tensor]
    block_calls: dict[Block, list[int]]
    compute_ms: float

    def rollout(self, block: Block) -> torch.Tensor:
        """Gradient-weighted attention rollout of ``block``: (1, L, L) float32.

        Raises:
            AttentionInputError: (field ``block``) cross attention (not square).
        """
        if block == "cross":
            raise AttentionInputError(
                "block", "gradient rollout runs through square self-attention: not 'cross'"
            )
        return gradient_rollout([self.relevance[i] for i in self.block_calls[block]])[None]

    def head_importance(self, block: Block) -> torch.Tensor:
        """|∂target/∂ξ_h| of every layer and head of ``block``: (N, H) float32."""
        return torch.stack([self.importance[i] for i in self.block_calls[block]])


def gradient_rollout(relevance: list[torch.Tensor]) -> torch.Tensor:
    """R = I, then R ← R + Ā_l R for each layer, first layer first (Chefer et al., eq. 6).

    Args:
        relevance: per layer, Ā (L, L) = E_h[(∇A ⊙ A)^+].

    Returns:
        (L, L) float32.

    Raises:
        ValueError: no layer.
    """
    if not relevance:
        raise ValueError("gradient_rollout needs at least one layer")
    rollout = torch.eye(relevance[0].shape[-1], dtype=torch.float64)
    for layer in relevance:
        rollout = rollout + layer.double() @ rollout
    return rollout.float()


def gradient_cells(model: PretrainedModel, length: int, target_length: int | None) -> int:
    """N x H x L_q x L_k of every block for one input (what a gradient pass keeps)."""
    target = length if target_length is None else target_length
    # a decoder's block reads the input itself (no target_length: target is length)
    areas = {"encoder": length * length, "decoder": target * target, "cross": target * length}
    return sum(
        model.block_layers(block) * model.block_heads(block) * areas[block]
        for block in model.blocks
    )


def check_gradient_cells(model: PretrainedModel, length: int, target_length: int | None) -> None:
    """Refuse an input whose gradient pass would keep over :data:`MAX_GRADIENT_CELLS` weights.

    Raises:
        AttentionInputError: (field ``texts``) as above.
    """
    cells = gradient_cells(model, length, target_length)
    if cells > MAX_GRADIENT_CELLS:
        raise AttentionInputError(
            "texts",
            f"gradient methods keep every layer's and head's weights for the backward pass: "
            f"{cells:,} here, over the {MAX_GRADIENT_CELLS:,} allowed (use a shorter text)",
        )


def generation_prompt_ids(model: PretrainedModel) -> list[int]:
    """The token ids of the chat template's opening of the assistant's turn.

    ``<|im_start|>assistant`` and a newline for SmolLM2: what ``add_generation_prompt``
    appends after the last message. Empty for a tokenizer without a chat template.
    """
    tokenizer = model.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        return []
    turn = [{"role": "user", "content": "x"}]
    opened = str(tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True))
    closed = str(tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=False))
    if not opened.startswith(closed) or opened == closed:
        return []
    return list(tokenizer(opened[len(closed) :], add_special_tokens=False)["input_ids"])


def last_content_position(model: PretrainedModel, batch: TokenizedBatch) -> int:
    """The default target of a decoder's or encoder-decoder's gradient method.

    The last token of input 0 that is neither special (``<|im_end|>``, ``</s>``), nor
    only whitespace once decoded (the newline after a chat turn), nor part of the chat
    template's opening of the assistant's turn when the input ends with it (a chat prompt
    with nothing generated yet): the last token of the text itself, or of what was
    generated. The last token when there is none.

    Args:
        model: its tokenizer decodes the tokens.
        batch: one input (B = 1): the text, or an encoder-decoder's decoder input.

    Returns:
        A position in 0 .. L - 1.
    """
    special = batch.special_tokens_mask[0]
    ids = batch.input_ids[0].tolist()[: len(batch.tokens[0])]
    end = len(ids)
    opening = generation_prompt_ids(model)
    if opening and ids[-len(opening) :] == opening:
        end -= len(opening)
    for position in range(end - 1, -1, -1):
        if not special[position] and str(model.tokenizer.decode([ids[position]])).strip():
            return position
    return len(ids) - 1


def gradient_pass(
    model: PretrainedModel,
    batch: TokenizedBatch,
    targets: TokenizedBatch | None = None,
    *,
    position: int | None = None,
    token_id: int | None = None,
    device: str = "auto",
    ablate: dict[int, tuple[int, ...]] | None = None,
) -> GradientPass:
    """One forward and backward pass of one input from a target (module docstring).

    Args:
        model: any family.
        batch: one input (B = 1), from :meth:`.model.PretrainedModel.tokenize`.
        targets: an encoder-decoder's decoder input, else None.
        position: the target's output position (negative counts from the end); None for
            the last content token (:func:`last_content_position`: decoders,
            encoder-decoders) or 0 (encoders).
        token_id: the next token whose logit is the target; None for the most likely one.
            Refused for encoders.
        device: "auto", "cpu" or "cuda".
        ablate: heads switched off (:func:`.recorder.ablate_heads`), their gates 0.

    Returns:
        A :class:`GradientPass`.

    Raises:
        AttentionInputError: (field ``target_index``) no such position; (``target_token_id``)
            a token beyond the vocabulary or given to an encoder; (``texts``) more than
            :data:`MAX_GRADIENT_CELLS` weights, or as :meth:`.model.PretrainedModel.run`.
    """
    if batch.input_ids.shape[0] != 1:
        raise AttentionInputError("texts", "gradient methods explain one input at a time")
    length = int(batch.input_ids.shape[1])
    target_length = None if targets is None else int(targets.input_ids.shape[1])
    check_gradient_cells(model, length, target_length)
    outputs_length = target_length if target_length is not None else length
    kind = model.spec.gradient_target
    if position is None:
        position = 0 if kind == "embedding" else last_content_position(model, targets or batch)
    if not -outputs_length <= position < outputs_length:
        raise AttentionInputError(
            "target_index", f"{position} is not a position of the {outputs_length} tokens"
        )
    position %= outputs_length
    if token_id is not None and kind == "embedding":
        raise AttentionInputError(
            "target_token_id",
            f"{model.name} is {model.described}: its target is an embedding score, not a logit",
        )
    if token_id is not None and not 0 <= token_id < model.vocab_size:
        raise AttentionInputError(
            "target_token_id", f"{token_id} is not below the vocabulary size {model.vocab_size}"
        )
    run_on, network = model.placed_on(device)
    inputs = model.forward_inputs(batch, targets, run_on)
    start = time.perf_counter()
    with (
        torch.enable_grad(),
        record_attention() as recording,
        ablate_heads(ablate),
        capture_gradients() as capture,
    ):
        try:
            if kind == "embedding":
                value = embedding_score(
                    network(**inputs).last_hidden_state[0].float(),
                    inputs["attention_mask"][0].bool(),
                    position,
                )
            else:
                logits = _logits(model, network, inputs, position).float()
                if token_id is None:
                    token_id = int(logits.argmax())
                value = logits[token_id]
        except IndexError as error:
            raise AttentionInputError(
                "texts", f"{model.name} cannot take this input ({error})"
            ) from error
        grads = torch.autograd.grad(value, [*capture.weights, *capture.gates], allow_unused=True)
    calls = len(capture.weights)
    relevance = []
    for weights, grad in zip(capture.weights, grads[:calls], strict=True):
        if grad is None:  # a layer the target does not depend on (after the position)
            grad = torch.zeros_like(weights)
        relevance.append((grad * weights.detach()).clamp_min(0).mean(dim=1)[0].float().cpu())
    importance = [
        torch.zeros(gate.shape) if grad is None else grad.abs().float().cpu()
        for gate, grad in zip(capture.gates, grads[calls:], strict=True)
    ]
    if run_on.type == "cuda":
        torch.cuda.synchronize(run_on)
    return GradientPass(
        target=GradientTarget(kind, position, token_id, float(value.detach())),
        relevance=relevance,
        importance=importance,
        block_calls=model.block_calls(network, recording),
        compute_ms=(time.perf_counter() - start) * 1000.0,
    )


def embedding_score(hidden: torch.Tensor, keep: torch.Tensor, position: int) -> torch.Tensor:
    """⟨h_position, ē⟩ / ‖ē‖, ē the mean of the kept tokens' states, held fixed (no gradient).

    Args:
        hidden: (L, d_model) last hidden states of one input.
        keep: (L,) bool, the tokens that are not padding.
        position: the token whose component is taken.

    Returns:
        A 0-d tensor in ``hidden``'s graph.
    """
    mean = hidden.detach()[keep].mean(dim=0)
    score: torch.Tensor = hidden[position] @ (mean / mean.norm().clamp_min(1e-12))
    return score


def _logits(
    model: PretrainedModel,
    network: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    position: int,
) -> torch.Tensor:
    """The next-token logits (vocab,) at one output position, with autograd on."""
    if model.spec.outputs == "next-token":
        backbone = network.base_model
        head = network.get_output_embeddings()  # type: ignore[no-untyped-call]
        if backbone is not network and head is not None:
            hidden = backbone(**inputs, use_cache=False).last_hidden_state
            return head(hidden[0, position])  # type: ignore[no-any-return]
    return network(**inputs, use_cache=False).logits[0, position]  # type: ignore[no-any-return]
