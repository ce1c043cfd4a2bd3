"""Check an AttnViz result against attention implementations we did not write.

References, both loaded with the model's own W_q, W_k, W_v and W_o:

1. ``torch.nn.MultiheadAttention(d_model, num_heads, batch_first=True)`` called with
   ``need_weights=True, average_attn_weights=False``: per-head weights and output.
   Its masks are built here independently from the ids and the mask name, in
   PyTorch's polarity (True = ignore): ``key_padding_mask`` (B, L_k) for padding and
   a (L, L) upper-triangular ``attn_mask`` for causal.
2. ``torch.nn.functional.scaled_dot_product_attention`` (boolean mask, True = attend):
   the attention output (it returns no weights), concatenated and passed through W_o.

Fully-masked query rows are compared under AttnViz's documented rule
(:mod:`attnviz.attention.mha`). PyTorch's MultiheadAttention gives NaN there. With the
default -inf fill, the expected weights are 0 and the expected output is W_o's bias.
With a finite fill (the tutorials' behaviour), the expected weights are uniform, 1 / L_k,
and the expected output is W_o applied to the mean of V over all keys.
``scaled_dot_product_attention`` itself returns 0 for such rows, which matches the
-inf rule. With a finite fill, its fully-masked rows are compared under the same
rule as above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812  (the PyTorch convention)

from .mha import MultiHeadAttention

HALF_TOLERANCE: Final[dict[torch.dtype, float]] = {
    torch.float16: 1e-2,
    torch.bfloat16: 5e-2,
}
"""Largest absolute difference that still counts as a match in half precision: the
inputs are rounded to 11 (float16) or 8 (bfloat16) bits, and bfloat16 rounds at
about 4e-3, so these are fixed, measured margins rather than the bound below."""


def accumulation_length(d_model: int, d_k: int, len_k: int) -> int:
    """n, the summed lengths of the four chained sums of one attention layer.

    The projections sum d_model products and a bias (d_model + 1), the scores Q K^T
    sum d_k, the output weights @ V sums L_k, and W_o sums d_model + 1 again.
    """
    return (d_model + 1) + d_k + len_k + (d_model + 1)


ROUNDING_LAMBDA: Final = 10.0
"""lambda of the probabilistic bound: the chance that one length-n sum errs by more
is below 2 n exp(-lambda**2 / 2), about 1e-18 at n = 4096."""


def float_tolerance(dtype: torch.dtype, n: int, magnitude: float) -> float:
    """The largest difference two correct float32 / float64 computations can show.

    A sum of n products computed in floating point errs by at most
    gamma~_n * sum |x_i y_i|, with gamma~_n = exp(lambda sqrt(n) u + n u**2 / (1 - u)) - 1
    (about lambda sqrt(n) u) and u the unit roundoff, 2**-24 in float32 and 2**-53
    in float64, except with probability below 2 n exp(-lambda**2 (1 - u)**2 / 2)
    (Higham & Mary, "A New Approach to Probabilistic Rounding Error Analysis", SIAM
    J. Sci. Comput. 41(5), 2019, Theorem 2.4). The worst-case gamma_n = n u / (1 - n u)
    (Higham 2002, Lemma 3.1) is reached only when every rounding error has the same
    sign; it would allow 0.2 at d_model 512 and say nothing. Chained sums add their
    gammas, so the layer errs by at most gamma~_n * M, with n from
    :func:`accumulation_length` and M the largest absolute sum a stage accumulates
    (:func:`stage_magnitude`). Softmax carries an absolute score error over to the
    weights at most about twice, which the chain covers. Two correct implementations
    (AttnViz and PyTorch, each summing in its own order) differ by up to twice that.

    Args:
        dtype: torch.float32 or torch.float64.
        n: the accumulation length.
        magnitude: M (taken as at least 1).

    Returns:
        2 * gamma~_n * M. In float32 with M = 1: 6.5e-6 at the tutorial size
        (d_model 8, L 10, n = 32) and 7.7e-5 at L = 4096. A wrong mask, scale or
        head split moves weights by 1e-2 or more; measured differences of correct
        results are 1e-7 to 3e-6.
    """
    u = torch.finfo(dtype).eps / 2
    gamma = math.expm1(ROUNDING_LAMBDA * math.sqrt(n) * u + n * u * u / (1 - u))
    return 2 * gamma * max(magnitude, 1.0)


def stage_magnitude(
    attention: MultiHeadAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    q_heads: torch.Tensor,
    k_heads: torch.Tensor,
) -> tuple[float, float]:
    """M for the weights and M for the output (each at least 1).

    Each bounds the sums sum |x_i y_i| that the stages before it accumulate.

    Projections: a = max of |x| @ |W|^T + |b| over W_q, W_k, W_v. Scores: by
    Cauchy-Schwarz at most max ||q|| * max ||k|| / sqrt(d_k) per head, from the
    reference's own projections ``q_heads`` (B, H, L_q, d_k) and ``k_heads``
    (B, H, L_k, d_k), which already carry sqrt(d_k) in q when AttnViz does not scale
    (:func:`torch_multihead_attention_from`). Weights @ V: at most a (the weights are
    >= 0 and sum to 1). W_o: at most a * max_i sum_j |W_o[i, j]| + max |b_o|. Float64.
    The weights depend on the projections and scores only: M_w = max(a, scores);
    the output on every stage: M_o = max(M_w, W_o's).
    """
    with torch.no_grad():
        a = 0.0
        for linear, x in ((attention.W_q, query), (attention.W_k, key), (attention.W_v, key)):
            sums = x.abs().double() @ linear.weight.abs().double().T + linear.bias.abs().double()
            a = max(a, float(sums.max()) if sums.numel() else 0.0)
        q = q_heads.double().norm(dim=-1)  # (B, H, L_q)
        k = k_heads.double().norm(dim=-1)  # (B, H, L_k)
        scores = 0.0
        if q.numel() and k.numel():
            scores = float(q.amax(dim=(0, 2)).mul(k.amax(dim=(0, 2))).max())
            scores /= math.sqrt(attention.d_k)
        w_o = attention.W_o
        out = a * float(w_o.weight.abs().double().sum(dim=1).max()) + float(w_o.bias.abs().max())
    weights = max(1.0, a, scores)
    return weights, max(weights, out)


@dataclass(frozen=True)
class Verification:
    """Maximum absolute differences between AttnViz and PyTorch's references.

    Attributes:
        mha_weights_max_abs_diff: weights vs nn.MultiheadAttention, over (B, H, L_q, L_k).
        mha_output_max_abs_diff: output vs nn.MultiheadAttention, over (B, L_q, d_model).
        sdpa_output_max_abs_diff: output vs scaled_dot_product_attention + W_o.
        fully_masked_rows: query rows (over B and L_q) that the reference masks
            entirely; they are compared under AttnViz's rule.
        weights_tolerance: the largest weight difference that counts as a match:
            in float32 and float64 the bound :func:`float_tolerance` derives from
            the sizes and magnitudes (so that a correct result never counts as a
            mismatch, at any length); 1e-2 for float16 and 5e-2 for bfloat16.
        output_tolerance: the same for the layer outputs (a longer chain of sums).
        tolerance: the larger of the two.
        matches: every difference is at most ``tolerance``.
        torch_version: the PyTorch that computed the references.
    """

    mha_weights_max_abs_diff: float
    mha_output_max_abs_diff: float
    sdpa_output_max_abs_diff: float
    fully_masked_rows: int
    weights_tolerance: float
    output_tolerance: float
    tolerance: float
    matches: bool
    torch_version: str


def torch_multihead_attention_from(
    attention: MultiHeadAttention, *, scale: bool = True
) -> nn.MultiheadAttention:
    """A ``torch.nn.MultiheadAttention`` holding ``attention``'s parameters.

    in_proj_weight = [W_q; W_k; W_v] (3 * d_model, d_model), in_proj_bias likewise,
    and out_proj = W_o. The module is in eval mode, on the same device and dtype.
    With ``scale=False`` the W_q rows and bias are multiplied by sqrt(d_k), so that
    PyTorch's 1/sqrt(d_k) cancels and the scores are the unscaled Q K^T.
    """
    weight = attention.W_q.weight
    reference = nn.MultiheadAttention(
        attention.d_model,
        attention.num_heads,
        batch_first=True,
        device=weight.device,
        dtype=weight.dtype,
    )
    with torch.no_grad():
        reference.in_proj_weight.copy_(
            torch.cat([attention.W_q.weight, attention.W_k.weight, attention.W_v.weight])
        )
        assert reference.in_proj_bias is not None  # bias=True by construction
        reference.in_proj_bias.copy_(
            torch.cat([attention.W_q.bias, attention.W_k.bias, attention.W_v.bias])
        )
        reference.out_proj.weight.copy_(attention.W_o.weight)
        reference.out_proj.bias.copy_(attention.W_o.bias)
        if not scale:
            d_model = attention.d_model
            reference.in_proj_weight[:d_model] *= math.sqrt(attention.d_k)
            reference.in_proj_bias[:d_model] *= math.sqrt(attention.d_k)
    return reference.eval()


def pytorch_masks(
    mask_name: str, query_ids: torch.Tensor, key_ids: torch.Tensor, pad_id: int
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """PyTorch-polarity masks (True = ignore) for a mask name, built from the ids.

    Returns:
        key_padding_mask (B, L_k) bool or None, and attn_mask (L_q, L_k) bool or None.
    """
    key_padding_mask = (key_ids == pad_id) if "padding" in mask_name else None
    attn_mask = None
    if "causal" in mask_name:
        len_q, len_k = query_ids.shape[1], key_ids.shape[1]
        ones = torch.ones(len_q, len_k, dtype=torch.bool, device=query_ids.device)
        attn_mask = torch.triu(ones, diagonal=1)
    return key_padding_mask, attn_mask


def verify_attention(
    attention: MultiHeadAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    query_ids: torch.Tensor,
    key_ids: torch.Tensor,
    *,
    mask_name: str,
    pad_id: int,
    mask_fill: float,
    attn_weights: torch.Tensor,
    attn_output: torch.Tensor,
    scale: bool = True,
) -> Verification:
    """Compare AttnViz's weights and output with PyTorch's references.

    Args:
        attention: the layer that produced the result.
        query: (B, L_q, d_model) embedded queries.
        key: (B, L_k, d_model) embedded keys, which are also the values.
        query_ids: (B, L_q) int64, for building the masks.
        key_ids: (B, L_k) int64, for building the masks.
        mask_name: "none", "padding", "causal" or "padding_causal".
        pad_id: the padding id.
        mask_fill: the fill AttnViz used (-inf, or finite as in the tutorials).
        attn_weights: (B, H, L_q, L_k) AttnViz weights, on any device.
        attn_output: (B, L_q, d_model) AttnViz output.
        scale: whether AttnViz divided the scores by sqrt(d_k).

    Returns:
        The maximum absolute differences, as a :class:`Verification`.
    """
    device = query.device
    attn_weights = attn_weights.to(device)
    attn_output = attn_output.to(device)
    reference = torch_multihead_attention_from(attention, scale=scale)
    key_padding_mask, attn_mask = pytorch_masks(mask_name, query_ids, key_ids, pad_id)
    batch_size, num_heads, len_q, len_k = attn_weights.shape

    ignore = torch.zeros(batch_size, len_q, len_k, dtype=torch.bool, device=device)
    if key_padding_mask is not None:
        ignore = ignore | key_padding_mask[:, None, :]
    if attn_mask is not None:
        ignore = ignore | attn_mask[None, :, :]
    fully_masked = ignore.all(dim=-1)  # (B, L_q)

    with torch.inference_mode():
        mha_output, mha_weights = reference(
            query,
            key,
            key,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            need_weights=True,
            average_attn_weights=False,
        )
        # scaled_dot_product_attention: the same projections, True = attend.
        w_q, w_k, w_v = reference.in_proj_weight.chunk(3)
        assert reference.in_proj_bias is not None
        b_q, b_k, b_v = reference.in_proj_bias.chunk(3)
        d_k = attention.d_k

        def heads(x: torch.Tensor) -> torch.Tensor:
            return x.view(batch_size, -1, num_heads, d_k).transpose(1, 2)  # (B, H, L, d_k)

        q_heads = heads(F.linear(query, w_q, b_q))  # (B, H, L_q, d_k)
        k_heads = heads(F.linear(key, w_k, b_k))  # (B, H, L_k, d_k)
        sdpa_heads = F.scaled_dot_product_attention(
            q_heads, k_heads, heads(F.linear(key, w_v, b_v)), attn_mask=(~ignore)[:, None, :, :]
        )  # (B, H, L_q, d_k)
        sdpa_concat = sdpa_heads.transpose(1, 2).reshape(batch_size, len_q, -1)
        sdpa_output = reference.out_proj(sdpa_concat)  # (B, L_q, d_model)

        # AttnViz's rule for fully-masked rows, from PyTorch's own parts.
        rows = fully_masked[:, None, :].expand(batch_size, num_heads, len_q)
        if math.isinf(mask_fill):
            rule_weights = torch.zeros_like(mha_weights)
            rule_output = reference.out_proj.bias.expand_as(mha_output)
        else:
            rule_weights = torch.full_like(mha_weights, 1.0 / len_k)
            mean_value = F.linear(key, w_v, b_v).mean(dim=1, keepdim=True)  # (B, 1, d_model)
            rule_output = reference.out_proj(mean_value).expand_as(mha_output)
            sdpa_output = torch.where(fully_masked[..., None], rule_output, sdpa_output)
        mha_weights = torch.where(rows[..., None], rule_weights, mha_weights)
        mha_output = torch.where(fully_masked[..., None], rule_output, mha_output)

    def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
        if a.numel() == 0:
            return 0.0
        return float((a.to(torch.float64) - b.to(torch.float64)).abs().max())

    diffs = (
        max_abs(attn_weights, mha_weights),
        max_abs(attn_output, mha_output),
        max_abs(attn_output, sdpa_output),
    )
    if attn_output.dtype in HALF_TOLERANCE:
        weights_tolerance = output_tolerance = HALF_TOLERANCE[attn_output.dtype]
    else:
        m_weights, m_output = stage_magnitude(attention, query, key, q_heads, k_heads)
        d_model, d_k = attention.d_model, attention.d_k
        # Weights: projections, scores and the softmax's sum over L_k (softmax at
        # most doubles an absolute score error).
        n_weights = (d_model + 1) + d_k + len_k
        weights_tolerance = 2 * float_tolerance(attn_output.dtype, n_weights, m_weights)
        output_tolerance = float_tolerance(
            attn_output.dtype, accumulation_length(d_model, d_k, len_k), m_output
        )
    return Verification(
        mha_weights_max_abs_diff=diffs[0],
        mha_output_max_abs_diff=diffs[1],
        sdpa_output_max_abs_diff=diffs[2],
        fully_masked_rows=int(fully_masked.sum()),
        weights_tolerance=weights_tolerance,
        output_tolerance=output_tolerance,
        tolerance=max(weights_tolerance, output_tolerance),
        matches=all(
            math.isfinite(d) and d <= bound
            for d, bound in zip(
                diffs, (weights_tolerance, output_tolerance, output_tolerance), strict=True
            )
        ),
        torch_version=torch.__version__,
    )
