"""The whole computation behind one AttnViz request: ids -> embeddings -> attention.

Pipeline (tutorial 000_ead306c3acdd1f55.txt sections 7.2-7.8): pad the batch,
``nn.Embedding(vocab_size, d_model)`` -> (B, L, d_model), multi-head attention with
the chosen mask -> per-head weights (B, H, L_q, L_k). Self-attention uses the batch
for queries, keys and values; cross (encoder-decoder) attention takes the queries
from the target batch (L_q = T_L) and keys and values from the source batch
(L_k = S_L), with the source padding mask.

Reproducibility: every parameter is drawn on the CPU from one ``torch.Generator``
seeded with ``seed`` (:mod:`attnviz.attention.parameters`), in a fixed order: embedding, then
W_q, W_k, W_v, W_o, weight before bias. The same request therefore gives the same
parameters on every call and machine, and the global RNG is never touched.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

import torch
from torch import nn

from .errors import AttentionInputError
from .masks import build_mask
from .mha import MultiHeadAttention, count_parameters
from .module_cache import MODULES
from .parameters import build_seeded
from .summary import dropout_weights, head_summary
from .tokens import SequenceInput, encode_source_target
from .verify import Verification, verify_attention

DeviceName = Literal["auto", "cpu", "cuda"]
DEVICE_NAMES: Final[tuple[str, ...]] = get_args(DeviceName)
StageName = Literal["q", "k", "v", "scores", "scaled_scores", "masked_scores", "head_output"]
STAGE_NAMES: Final[tuple[str, ...]] = get_args(StageName)
"""Step-through stages a request can ask for (``include``)."""
DtypeName = Literal["float32", "float64", "float16", "bfloat16"]
DTYPES: Final[dict[str, torch.dtype]] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
"""Parameter and activation dtypes; with half precision the softmax runs in float32."""

MAX_NUM_HEADS: Final = 64
"""The most heads the API's seeded layer takes; the divisors an error suggests stop here."""

FLOAT32_LOWEST: Final = float(torch.finfo(torch.float32).min)
"""-3.4028234663852886e+38: the lowest finite mask_fill the API takes, since the
scores are masked in float32 for every dtype but float64."""


@dataclass(frozen=True)
class LayerConfig:
    """The seeded attention layer: its widths, seed, vocabulary and device.

    Passed whole to :func:`compute_attention`, :func:`.lessons.decoding_experiment` and
    :func:`.transformer.compute_transformer`, as nanoGPT passes its ``GPTConfig``.
    The compute functions check it and raise :class:`AttentionInputError` naming the
    field.

    Attributes:
        d_model: model width; ``num_heads`` must divide it (d_k = d_model // num_heads).
        num_heads: H.
        seed: the RNG seed every parameter is drawn from (module docstring).
        pad_id: the padding id; padding positions are labelled "<pad>".
        vocab_size: rows of the embedding table; ids lie in [0, vocab_size).
        device: "auto" (CUDA if available, else CPU), "cpu" or "cuda".
    """

    d_model: int = 8
    num_heads: int = 2
    seed: int = 0
    pad_id: int = 0
    vocab_size: int = 100
    device: str = "auto"

    def check(self) -> None:
        """Check the widths and the vocabulary (the device is checked where it is used).

        Raises:
            AttentionInputError: naming d_model or num_heads (below 1, or num_heads
                not dividing d_model, with the divisors to pick from) or vocab_size
                (below 1).
        """
        check_widths(self.d_model, self.num_heads)
        if self.vocab_size < 1:
            raise AttentionInputError("vocab_size", f"must be >= 1, got {self.vocab_size}")


def masking_dtype(dtype: str) -> torch.dtype:
    """The dtype the scores are masked and softmaxed in: float64 for float64, else float32.

    Half precision is masked in float32
    (:func:`attnviz.attention.mha.scaled_dot_product_attention`).
    """
    return torch.float64 if dtype == "float64" else torch.float32


class EmbeddedAttention(nn.Module):
    """An embedding table and one multi-head attention layer.

    Build it seeded with :meth:`seeded`; plain construction leaves PyTorch's own
    (global-RNG) initialisation.

    Args:
        vocab_size: rows of the embedding table.
        d_model: model width.
        num_heads: H; must divide d_model.

    Raises:
        AttentionInputError: (field ``num_heads``) if num_heads does not divide d_model.
    """

    def __init__(self, vocab_size: int, d_model: int, num_heads: int) -> None:
        super().__init__()
        check_widths(d_model, num_heads)
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.attention = MultiHeadAttention(d_model, num_heads)

    @classmethod
    def seeded(cls, vocab_size: int, d_model: int, num_heads: int, seed: int) -> EmbeddedAttention:
        """The model with every parameter drawn from ``seed`` (:mod:`.parameters`)."""
        return build_seeded(lambda: cls(vocab_size, d_model, num_heads), seed)

    @classmethod
    def cached(
        cls,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        seed: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> EmbeddedAttention:
        """:meth:`seeded`, on ``device`` in ``dtype``, from the module cache.

        Parameters are drawn in float32 on the CPU, then cast, so every dtype and
        device starts from the same numbers.
        """
        key = (cls.__name__, vocab_size, d_model, num_heads, seed, str(device), str(dtype))
        return MODULES.get(
            key, lambda: cls.seeded(vocab_size, d_model, num_heads, seed).to(device, dtype)
        )

    def forward(
        self,
        query_ids: torch.Tensor,
        key_ids: torch.Tensor,
        mask: torch.Tensor | None,
        mask_fill: float = float("-inf"),
        *,
        scale: bool = True,
        stages: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Embed and attend.

        Args:
            query_ids: (B, L_q) int64.
            key_ids: (B, L_k) int64 (the same tensor as query_ids for self-attention).
            mask: bool broadcastable to (B, L_q, L_k), True = attend; or None.
            mask_fill: score of masked entries (-inf, or finite as in the tutorials).
            scale: divide the scores by sqrt(d_k).
            stages: if given, filled with the step-through tensors
                (:meth:`MultiHeadAttention.forward`).

        Returns:
            attn_output (B, L_q, d_model) and attn_weights (B, H, L_q, L_k).
        """
        query = self.embedding(query_ids)  # (B, L_q, d_model)
        key = query if key_ids is query_ids else self.embedding(key_ids)  # (B, L_k, d_model)
        attn_output, attn_weights = self.attention(
            query, key, key, mask, mask_fill, scale=scale, stages=stages
        )
        return attn_output, attn_weights


@dataclass(frozen=True)
class AttentionResult:
    """Everything one attention run produced, on the CPU.

    Attributes:
        attn_weights: (B, H, L_q, L_k) per-head softmax weights: float32 for half
            precision (the softmax runs in float32), else the computation's dtype.
        attn_output: (B, L_q, d_model) float, the layer output after W_o.
        mask: (B, L_q, L_k) bool, True = attend (all True for mask "none").
        fully_masked: (B, L_q) bool, query rows with every key masked; their
            weights are all 0 under the -inf fill and uniform, 1/L_k, under a finite
            one (see :mod:`attnviz.attention.mha`).
        query_ids, key_ids: (B, L_q) and (B, L_k) int64, padded ids.
        query_labels, key_labels: per sequence, one label per position.
        num_parameters: parameters of the attention layer (W_q, W_k, W_v, W_o with
            biases), 4 * d_model**2 + 4 * d_model.
        num_embedding_parameters: vocab_size * d_model.
        device: the device the computation ran on ("cpu", "cuda").
        dtype: "float32", "float64", "float16" or "bfloat16", the computation's.
        compute_ms: wall time of the forward pass in milliseconds (ms).
        mask_fill: the score masked entries were given (-inf or finite).
        verification: differences from PyTorch's references when asked for
            (``verify=True``), else None.
        scale: whether the scores were divided by sqrt(d_k).
        stages: the step-through tensors asked for in ``stages``, by name
            (:data:`STAGE_NAMES`): q, k, v, head_output (B, H, L, d_k); scores,
            scaled_scores, masked_scores (B, H, L_q, L_k).
        dropout: the dropout probability applied to ``dropped_weights``.
        dropped_weights: (B, H, L_q, L_k) the weights after dropout in training
            mode, when dropout > 0, else None.
        head_entropy_bits: (B, H) mean row entropy in bits, fully-masked rows left out.
        head_max_weight: (B, H) largest weight of each head.
        head_mean_row_max: (B, H) mean over rows (fully-masked ones left out) of each
            row's largest weight.
        head_mean_weights: (B, L_q, L_k) the average of the heads.
    """

    attn_weights: torch.Tensor
    attn_output: torch.Tensor
    mask: torch.Tensor
    fully_masked: torch.Tensor
    query_ids: torch.Tensor
    key_ids: torch.Tensor
    query_labels: list[list[str]]
    key_labels: list[list[str]]
    num_parameters: int
    num_embedding_parameters: int
    device: str
    dtype: str
    compute_ms: float
    mask_fill: float
    verification: Verification | None
    scale: bool
    stages: dict[str, torch.Tensor]
    dropout: float
    dropped_weights: torch.Tensor | None
    head_entropy_bits: torch.Tensor
    head_max_weight: torch.Tensor
    head_mean_row_max: torch.Tensor
    head_mean_weights: torch.Tensor


def check_widths(d_model: int, num_heads: int) -> None:
    """Validate d_model and num_heads.

    Raises:
        AttentionInputError: d_model or num_heads below 1 (field named after it),
            or num_heads not dividing d_model (field ``num_heads``).
    """
    if d_model < 1:
        raise AttentionInputError("d_model", f"must be >= 1, got {d_model}")
    if num_heads < 1:
        raise AttentionInputError("num_heads", f"must be >= 1, got {num_heads}")
    if d_model % num_heads != 0:
        raise AttentionInputError(
            "num_heads", f"num_heads must divide d_model ({d_model}): try {head_choices(d_model)}"
        )


def head_choices(d_model: int, most: int = MAX_NUM_HEADS) -> str:
    """The num_heads that divide ``d_model``, up to ``most``, in words: "1, 2, 5 or 10"."""
    divisors = [str(h) for h in range(1, min(d_model, most) + 1) if d_model % h == 0]
    return divisors[0] if len(divisors) == 1 else f"{', '.join(divisors[:-1])} or {divisors[-1]}"


def check_dtype(name: str) -> None:
    """Validate a dtype name.

    Raises:
        AttentionInputError: (field ``dtype``) for a name not in :data:`DTYPES`.
    """
    if name not in DTYPES:
        raise AttentionInputError(
            "dtype", f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}"
        )


def resolve_device(name: str) -> torch.device:
    """Map "auto" | "cpu" | "cuda" to a torch.device.

    "auto" is CUDA when ``torch.cuda.is_available()``, else the CPU.

    Raises:
        AttentionInputError: (field ``device``) for an unknown name, or "cuda" on a
            machine where torch sees no CUDA device.
    """
    if name not in DEVICE_NAMES:
        raise AttentionInputError(
            "device", f"unknown device {name!r}; choose one of {', '.join(DEVICE_NAMES)}"
        )
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise AttentionInputError(
            "device",
            "'cuda' was requested but torch sees no CUDA device here "
            f"(torch {torch.__version__}); use 'cpu' or 'auto'",
        )
    return torch.device(name)


def compute_attention(
    sequences: Sequence[SequenceInput],
    config: LayerConfig | None = None,
    *,
    targets: Sequence[SequenceInput] | None = None,
    mask: str = "padding",
    dtype: str = "float32",
    mask_fill: float = float("-inf"),
    verify: bool = False,
    scale: bool = True,
    stages: Collection[str] = (),
    dropout: float = 0.0,
    dropout_seed: int = 0,
) -> AttentionResult:
    """Run seeded multi-head attention over a batch, as the tutorials do.

    Args:
        sequences: B source sequences, each a list of ids or a string of words.
        config: the layer (widths, seed, pad_id, vocabulary, device); None is
            ``LayerConfig()``: d_model 8, 2 heads, seed 0, pad_id 0, 100 ids, "auto".
        targets: optional B target sequences for cross (encoder-decoder) attention:
            queries from the targets, keys and values from ``sequences``.
        mask: "none", "padding", "causal" or "padding_causal" (True = attend, see
            :mod:`attnviz.attention.masks`); cross attention takes "none" or "padding".
        dtype: "float32", "float64", "float16" or "bfloat16" (half precision is
            masked and softmaxed in float32).
        mask_fill: the score masked entries get before the softmax: -inf (default;
            fully-masked rows become 0) or a finite value <= 0 such as the tutorials'
            -1e9 (fully-masked rows become uniform), see :mod:`attnviz.attention.mha`.
        verify: also run PyTorch's references (:mod:`attnviz.attention.verify`) and
            report the differences in ``verification``.
        scale: divide the scores by sqrt(d_k) (the paper); False turns it off
            (tutorial 001 section 7).
        stages: names from :data:`STAGE_NAMES` to return in ``stages`` (the
            step-through of tutorials 000, 003 and 004).
        dropout: probability 0 <= p < 1 of dropout on the weights in training mode,
            returned in ``dropped_weights`` (tutorials 001 and 004); the output is the
            eval-mode output either way.
        dropout_seed: seed of the dropout mask.

    Returns:
        An :class:`AttentionResult` with weights of shape (B, H, L_q, L_k): L_q = L_k
        = L for self-attention, L_q = T_L and L_k = S_L for cross attention.

    Raises:
        AttentionInputError (a ValueError) naming the field: d_model or num_heads
            below 1 or not divisible, an empty batch or sequence, an id outside
            [0, vocab_size), an unknown mask, device or dtype, "cuda" without CUDA,
            a mask_fill that is NaN, above 0 or below the lowest finite value of
            :func:`masking_dtype` (float32: -3.4e38), an unknown stage, a dropout outside
            [0, 1), or a target batch whose size differs from the source batch.
    """
    layer = config or LayerConfig()
    layer.check()
    check_dtype(dtype)
    unknown = sorted(set(stages) - set(STAGE_NAMES))
    if unknown:
        raise AttentionInputError(
            "include", f"unknown stage {unknown[0]!r}; choose from {', '.join(STAGE_NAMES)}"
        )
    if not 0.0 <= dropout < 1.0:
        raise AttentionInputError("dropout", f"must lie in [0, 1), got {dropout}")
    lowest = float(torch.finfo(masking_dtype(dtype)).min)
    if math.isnan(mask_fill) or mask_fill > 0 or (math.isfinite(mask_fill) and mask_fill < lowest):
        raise AttentionInputError(
            "mask_fill",
            f"must be -inf or a finite number in [{lowest:.8g}, 0] (e.g. -1e9), got "
            f"{mask_fill:g}: the scores are masked in {str(masking_dtype(dtype))[6:]}",
        )
    cross = targets is not None
    source, maybe_target = encode_source_target(
        sequences, targets, pad_id=layer.pad_id, vocab_size=layer.vocab_size
    )
    target = source if maybe_target is None else maybe_target
    attn_mask = build_mask(mask, target.ids, source.ids, layer.pad_id, cross=cross)
    run_on = resolve_device(layer.device)

    model = EmbeddedAttention.cached(
        layer.vocab_size, layer.d_model, layer.num_heads, layer.seed, run_on, DTYPES[dtype]
    )
    query_ids = target.ids.to(run_on)
    key_ids = query_ids if not cross else source.ids.to(run_on)
    on_device_mask = None if attn_mask is None else attn_mask.to(run_on)

    with torch.inference_mode():
        start = time.perf_counter()
        recorded: dict[str, torch.Tensor] | None = {} if stages else None
        attn_output, attn_weights = model(
            query_ids, key_ids, on_device_mask, mask_fill, scale=scale, stages=recorded
        )
        if run_on.type == "cuda":
            torch.cuda.synchronize(run_on)
        compute_ms = (time.perf_counter() - start) * 1000.0
        verification = None
        if verify:
            verification = verify_attention(
                model.attention,
                model.embedding(query_ids),
                model.embedding(key_ids),
                query_ids,
                key_ids,
                mask_name=mask,
                pad_id=layer.pad_id,
                mask_fill=mask_fill,
                attn_weights=attn_weights,
                attn_output=attn_output,
                scale=scale,
            )

    batch_size, _, len_q, len_k = attn_weights.shape
    full_mask = (
        torch.ones(batch_size, len_q, len_k, dtype=torch.bool)
        if attn_mask is None
        else attn_mask.expand(batch_size, len_q, len_k).clone()
    )
    fully_masked = ~full_mask.any(dim=-1)
    weights_cpu = attn_weights.cpu()
    entropy_bits, max_weight, mean_row_max, mean_weights = head_summary(weights_cpu, fully_masked)
    return AttentionResult(
        attn_weights=weights_cpu,
        attn_output=attn_output.cpu(),
        mask=full_mask,
        fully_masked=fully_masked,
        query_ids=target.ids,
        key_ids=source.ids,
        query_labels=target.labels,
        key_labels=source.labels,
        num_parameters=count_parameters(model.attention),
        num_embedding_parameters=count_parameters(model.embedding),
        device=run_on.type,
        dtype=dtype,
        compute_ms=compute_ms,
        mask_fill=mask_fill,
        verification=verification,
        scale=scale,
        stages={name: recorded[name].cpu() for name in stages} if recorded else {},
        dropout=dropout,
        dropped_weights=dropout_weights(weights_cpu, dropout, dropout_seed) if dropout else None,
        head_entropy_bits=entropy_bits,
        head_max_weight=max_weight,
        head_mean_row_max=mean_row_max,
        head_mean_weights=mean_weights,
    )
