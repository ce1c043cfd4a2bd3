"""The GPU fast path of :func:`.tiles.tile`: one Triton kernel for block-max and block-mean tiles.

Each program computes one cell of the tile, for one input and head: the largest (or mean)
exact weight exp(s_ij - LSE_i) over the cell's factor_q rows x factor_k keys, s_ij the
scaled score (softcapped where the family has a cap), keys a row does not see left out
(causal, with the rule's offsets). The max of exp is the exp of the max (one exp per
cell); a block's sum needs one exp per score. No weight, no P·V, no L_q x L_k buffer:
the kernel reads q, k and the LSE and writes the tile.

* Grouped-query heads read their key/value head by index (h // group), never through
  ``repeat_interleave``;
* every base offset is int64 (batch x stride passes 2**31 for an 8B-shaped model at 32k);
* products are exact: bfloat16 and float16 states are multiplied as they are, with a float32
  accumulator, float32 states with IEEE float32 products (not TF32).

It runs where the states are on a CUDA device and Triton is installed, for layers whose
score terms it has (scaling, softcap) and whose mask is causal or none
(:func:`supports`); every other layer takes the torch path. On the CPU the tests run it
under Triton's interpreter (``TRITON_INTERPRET=1``, set before Triton is imported) against
the torch path and eager attention. Source: the identity of issue 52 (max of exp = exp of
max; the LSE as FlashAttention keeps it, Dao et al. 2022).
"""

from __future__ import annotations

import importlib.util
import math
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .kept_layer import KeptLayer


def available() -> bool:
    """Whether Triton is installed (the kernel can be compiled or interpreted)."""
    return importlib.util.find_spec("triton") is not None


FAILED: list[str] = []
"""Why the kernel was given up in this process (its first failure to compile or launch)."""


def usable() -> bool:
    """Whether the kernel may run here: Triton installed and no failure of it yet."""
    return not FAILED and available()


def kernel_tile_or_none(
    layer: KeptLayer,
    heads: list[int],
    rows: range,
    cols: range,
    reduce: str,
    factor: tuple[int, int],
) -> torch.Tensor | None:
    """:func:`kernel_tile`, or None once it failed to compile or launch.

    The failure is kept in :data:`FAILED`: the caller takes the torch path, and so does every
    later tile. Running out of device memory is raised, not kept: it says nothing of the kernel.
    """
    try:
        return kernel_tile(layer, heads, rows, cols, reduce, factor)
    except torch.OutOfMemoryError:
        raise
    except Exception as error:  # a compiler or driver failure: Triton's own exception types
        FAILED.append(f"{type(error).__name__}: {error}")
        return None


def supports(layer: KeptLayer) -> bool:
    """Whether the kernel computes this layer's tiles: no position bias, a causal or no mask."""
    if layer.position_bias is not None or layer.dense_mask is not None:
        return False
    rule = layer.rule
    return rule is None or rule.full or rule.causal


_KERNEL: Any = None


def _kernel() -> Any:
    """The Triton kernel, compiled (or interpreted) on first use."""
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton  # type: ignore[import-untyped]
    import triton.language as tl  # type: ignore[import-untyped]

    @triton.jit  # type: ignore[untyped-decorator]
    def tile_cells(  # type: ignore[no-untyped-def]
        q_ptr, k_ptr, lse_ptr, out_ptr, heads_ptr,
        stride_qb, stride_qh, stride_qm, stride_qd,
        stride_kb, stride_kh, stride_kn, stride_kd,
        stride_lb, stride_lh, stride_lm,
        stride_ob, stride_oh, stride_om, stride_on,
        num_heads, group, row0, col0, rows, cols, factor_q, factor_k, cells_k, shift,
        scaling, softcap,
        CAUSAL: tl.constexpr, SOFTCAP: tl.constexpr, MEAN: tl.constexpr, IEEE: tl.constexpr,
        HEAD_DIM: tl.constexpr, DIM: tl.constexpr, BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):  # fmt: skip
        cell = tl.program_id(0)
        pair = tl.program_id(1)
        b = (pair // num_heads).to(tl.int64)
        slot = (pair % num_heads).to(tl.int64)
        head = tl.load(heads_ptr + slot).to(tl.int64)
        kv_head = head // group
        r = cell // cells_k
        c = cell % cells_k
        m_start = r * factor_q
        m_end = tl.minimum(m_start + factor_q, rows)
        n_start = c * factor_k
        n_end = tl.minimum(n_start + factor_k, cols)
        d = tl.arange(0, DIM)
        in_d = d < HEAD_DIM
        q_base = q_ptr + b * stride_qb + head * stride_qh
        k_base = k_ptr + b * stride_kb + kv_head * stride_kh
        l_base = lse_ptr + b * stride_lb + head * stride_lh
        best = tl.full([], float("-inf"), tl.float32)
        total = tl.full([], 0.0, tl.float32)
        for m in range(m_start, m_end, BLOCK_M):
            offs_m = m + tl.arange(0, BLOCK_M)
            in_m = offs_m < m_end
            row = (row0 + offs_m).to(tl.int64)
            q = tl.load(
                q_base + row[:, None] * stride_qm + d[None, :] * stride_qd,
                mask=in_m[:, None] & in_d[None, :],
                other=0.0,
            )
            lse = tl.load(l_base + row * stride_lm, mask=in_m, other=float("inf"))
            for n in range(n_start, n_end, BLOCK_N):
                offs_n = n + tl.arange(0, BLOCK_N)
                in_n = offs_n < n_end
                col = (col0 + offs_n).to(tl.int64)
                k = tl.load(
                    k_base + col[:, None] * stride_kn + d[None, :] * stride_kd,
                    mask=in_n[:, None] & in_d[None, :],
                    other=0.0,
                )
                if IEEE:
                    s = tl.dot(q, tl.trans(k), input_precision="ieee")
                else:
                    s = tl.dot(q, tl.trans(k))
                s = s * scaling
                if SOFTCAP:
                    s = softcap * (2.0 * tl.sigmoid(2.0 * s / softcap) - 1.0)  # cap * tanh(s / cap)
                seen = in_m[:, None] & in_n[None, :]
                if CAUSAL:
                    seen = seen & ((row + shift)[:, None] >= col[None, :])
                t = tl.where(seen, s - lse[:, None], float("-inf"))
                if MEAN:
                    total += tl.sum(tl.where(seen, tl.exp(t), 0.0))
                else:
                    best = tl.maximum(best, tl.max(t))
        if MEAN:
            value = total / ((m_end - m_start) * (n_end - n_start)).to(tl.float32)
        else:
            value = tl.exp(best)
        out = out_ptr + b * stride_ob + slot * stride_oh + r.to(tl.int64) * stride_om
        tl.store(out + c.to(tl.int64) * stride_on, value)

    _KERNEL = tile_cells
    return _KERNEL


def kernel_tile(
    layer: KeptLayer,
    heads: list[int],
    rows: range,
    cols: range,
    reduce: str,
    factor: tuple[int, int],
) -> torch.Tensor:
    """As :func:`.tiles.tile` for one kept layer, by the Triton kernel (:func:`supports` it).

    Args:
        layer: a kept layer on the kernel's device (CUDA, or the CPU under the interpreter).
        heads: query heads, each 0 <= h < H.
        rows: query rows; ``cols``: key columns (step-1 ranges, checked by the caller).
        reduce: "max" or "mean".
        factor: (rows, columns) per cell.

    Returns:
        (B, len(heads), ceil(R / factor[0]), ceil(C / factor[1])) float32, on the layer's device.
    """
    size, _, _, _ = layer.shape
    factor_q, factor_k = factor
    cells_q, cells_k = math.ceil(len(rows) / factor_q), math.ceil(len(cols) / factor_k)
    device = layer.query.device
    out = torch.empty((size, len(heads), cells_q, cells_k), dtype=torch.float32, device=device)
    query, key, lse = layer.query, layer.key, layer.lse
    ieee = query.dtype == torch.float32
    if query.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        query, key, ieee = query.float(), key.float(), True
    head_dim = int(query.shape[-1])
    rule = layer.rule
    causal = rule is not None and rule.causal
    shift = 0 if rule is None else rule.q_offset - rule.kv_offset
    heads_index = torch.tensor(heads, dtype=torch.int32, device=device)
    _kernel()[(cells_q * cells_k, size * len(heads))](
        query, key, lse, out, heads_index,
        *query.stride(), *key.stride(), *lse.stride(), *out.stride(),
        len(heads), layer.group_size, rows.start, cols.start, len(rows), len(cols),
        factor_q, factor_k, cells_k, shift,
        float(layer.scaling), float(layer.softcap or 1.0),
        CAUSAL=causal, SOFTCAP=layer.softcap is not None, MEAN=reduce == "mean", IEEE=ieee,
        HEAD_DIM=head_dim, DIM=max(16, 1 << (head_dim - 1).bit_length()),
        BLOCK_M=min(64, max(16, 1 << (min(factor_q, 64) - 1).bit_length())),
        BLOCK_N=min(64, max(16, 1 << (min(factor_k, 64) - 1).bit_length())),
    )  # fmt: skip
    return out
