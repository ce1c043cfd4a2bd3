"""How the recorder computes one attention call: SDPA where it can, else eager attention.

SDPA (PyTorch's scaled_dot_product_attention, as transformers' "sdpa" implementation)
runs a plainly causal mask with its own causal flag, and a longer input's explicit mask in
chunks of query rows. What SDPA cannot express (a softcap, learned sinks) and what an
observer watches (:class:`AttentionObserver`) runs the module's own
``eager_attention_forward`` in chunks of query rows, each chunk's weights handed on before
the next is computed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final, Protocol

import torch
from torch import nn

from ..attention.cancellation import check_cancelled
from .calls import (
    POSITION_BIAS,
    AttentionCall,
    AttentionRecording,
    WeightsRecording,
    eager_attention,
)
from .mask_rules import dense_mask, is_rule_only, mask_rows, rule_of
from .tiles import KeptPass, TileError, last_key, row_lse, tile_weights

QUERY_CHUNK: Final = 512
"""Query rows per call of SDPA in a forward pass of a longer input whose mask is not plainly
causal (padding, a sliding window, an encoder's): the rows are independent (the explicit
mask says what each sees), and the computation is checked for cancellation between
chunks. A plainly causal mask runs as one call with SDPA's causal flag instead."""

OBSERVED_CHUNK_FLOATS: Final = 2**23
"""About how many weights (32 MB of float32) one query chunk of an observed layer holds:
512 rows of SmolLM2's 9 heads at 1,820 keys; fewer rows for longer inputs."""
OBSERVED_CHUNK_FLOATS_CUDA: Final = 2**26
"""The same on a CUDA device (256 MB of float32): a chunk's fixed costs (kernel launches,
the Python around them) dominate a GPU's time, which the CPU's 32 MB chunks multiplied:
on an H100, SmolLM2's grid at 32,768 tokens ran 1,170 chunks a layer, 254x its SDPA forward
(docs/performance.md). The admission's estimate (host memory) keeps the CPU's chunk."""

MIN_CHUNK_ROWS: Final = 64
"""The fewest query rows an observed chunk is given when it could have more (a chunk's
fixed costs: the eager function's key/value repeat, the Python around it)."""


def observed_chunk_floats(device: torch.device) -> int:
    """How many weights an observed chunk holds on ``device``.

    :data:`OBSERVED_CHUNK_FLOATS`, or :data:`OBSERVED_CHUNK_FLOATS_CUDA` on a CUDA device.
    """
    return OBSERVED_CHUNK_FLOATS_CUDA if device.type == "cuda" else OBSERVED_CHUNK_FLOATS


def chunk_rows(length_q: int, floats_per_row: int, budget: int) -> int:
    """Query rows per chunk of an observed layer: about ``budget`` weights each.

    At most an eighth of the rows (and at least :data:`MIN_CHUNK_ROWS`, at least 1): a
    causal chunk computes its rows against every key up to its last row, so a chunk of C
    rows computes about C / 2 rows' worth of masked keys; an eighth keeps that under 7% of
    the layer's work. ``floats_per_row``: the weights of one row (B x H x L_k).
    """
    rows = max(1, budget // max(1, floats_per_row))
    return min(rows, max(MIN_CHUNK_ROWS, -(-length_q // 8)))


class AttentionObserver(Protocol):
    """What an observed forward pass hands its attention weights to, chunk by chunk.

    Inside :func:`observe_attention`, an attention call the observer :meth:`wants`
    computes its weights with the model's *own* eager attention, in chunks of query rows
    (:meth:`row_chunks`), uses them for the layer's output, and hands each chunk to
    :meth:`take` before computing the next: no (B, H, L_q, L_k) tensor of a whole layer
    exists, and the view being built (pooled maps, statistics) grows as the pass runs.
    """

    def wants(self, module: nn.Module) -> bool:
        """Whether this call (the module's, in the pass's order) is observed."""

    def row_chunks(
        self, length_q: int, length_k: int, num_heads: int, device: torch.device
    ) -> list[tuple[int, int]]:
        """The [start, stop) query rows of each chunk, in order, covering 0..length_q.

        ``device``: where the call is computed (:func:`observed_chunk_floats`).
        """

    def take(self, start: int, stop: int, weights: torch.Tensor) -> None:
        """One chunk of weights: (B, H, stop - start, L_k'), float, in the model's dtype.

        L_k' <= L_k: the keys past L_k' are masked for every row of the chunk (weight 0).
        """

    def layer_done(self) -> None:
        """The observed call's last chunk has been taken."""


def needs_eager(module: nn.Module, kwargs: dict[str, Any]) -> bool:
    """Whether a call needs the model's eager attention: SDPA has no such option.

    Logit soft-capping (Gemma 2's ``softcap``: tanh(scores / cap) * cap) and learned
    attention sinks (gpt-oss's ``module.sinks``: one more logit per head in the softmax,
    dropped after it) change the weights in ways SDPA cannot express.
    """
    return kwargs.get("softcap") is not None or getattr(module, "sinks", None) is not None


def computed(call: AttentionCall, dropout: float) -> torch.Tensor:
    """attn_output (B, L_q, H, d_v) of a call no hook computes: SDPA where it can."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if needs_eager(call.module, call.kwargs):  # what SDPA cannot compute: the model's own eager
        return observed_attention(_Unobserved(), call)
    module, query, key, value = call.module, call.query, call.key, call.value
    kwargs = dict(call.kwargs)
    attention_mask = call.attention_mask
    bias = kwargs.pop(POSITION_BIAS, None)
    if bias is not None:  # SDPA takes it as part of the additive mask (T5's bias is L x L)
        attention_mask = bias if attention_mask is None else bias + dense_mask(attention_mask)
    length = int(query.shape[2])
    if bias is None and _plainly_causal(call):
        # The mask is exactly causal: SDPA's own causal flag gives the same output and lets
        # its kernel skip the masked half (a third less time for SmolLM2 at 2,048 tokens).
        attention_mask = None
    if attention_mask is None or length <= QUERY_CHUNK:
        output, _ = sdpa_attention_forward(
            module, query, key, value, dense_mask(attention_mask), scaling=call.scaling,
            dropout=dropout, **kwargs,
        )  # fmt: skip
        return output
    parts = []  # rows are independent: chunks of queries, a cancellation check between them
    for start in range(0, length, QUERY_CHUNK):
        check_cancelled()
        rows = slice(start, start + QUERY_CHUNK)
        mask = mask_rows(attention_mask, rows)
        part, _ = sdpa_attention_forward(
            module, query[:, :, rows], key, value, mask, scaling=call.scaling, dropout=dropout,
            **kwargs,
        )  # fmt: skip
        parts.append(part)
    return torch.cat(parts, dim=1)


def _plainly_causal(call: AttentionCall) -> bool:
    """Whether the call's mask is exactly the causal mask of a causal module's square call.

    No padding, no sliding window shorter than the input: key j is seen by query i iff
    j <= i. The verdict is kept on the mask object, which transformers hands to every
    layer, so it is computed once per forward pass.
    """
    mask, length = call.attention_mask, int(call.query.shape[2])
    if mask is None or length < 2 or int(call.key.shape[2]) != length:
        return False
    if not call.kwargs.get("is_causal", getattr(call.module, "is_causal", False)):
        return False
    verdict = getattr(mask, "_attnviz_causal", None)
    rule = rule_of(mask)
    if verdict is None and rule is not None and (rule.causal or is_rule_only(mask)):
        verdict = rule.causal  # known from the mask's rule (a rule-only mask has no values)
        mask._attnviz_causal = verdict  # type: ignore[attr-defined]
    if verdict is None:
        seen = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
        causal = torch.ones(length, length, dtype=torch.bool, device=mask.device).tril_()
        verdict = seen.shape[-2:] == causal.shape and bool((seen == causal).all())
        mask._attnviz_causal = verdict  # type: ignore[attr-defined]
    return bool(verdict)


class _Unobserved:
    """An observer that keeps nothing: the eager attention of a call SDPA cannot run."""

    def wants(self, module: nn.Module) -> bool:
        return True

    def row_chunks(
        self, length_q: int, length_k: int, num_heads: int, device: torch.device
    ) -> list[tuple[int, int]]:
        return [
            (start, min(length_q, start + QUERY_CHUNK)) for start in range(0, length_q, QUERY_CHUNK)
        ]

    def take(self, start: int, stop: int, weights: torch.Tensor) -> None:
        return None

    def layer_done(self) -> None:
        return None


def observed_attention(observer: AttentionObserver, call: AttentionCall) -> torch.Tensor:
    """One attention call by the model's eager attention in query chunks, weights observed.

    Each chunk of rows runs the module's own ``eager_attention_forward`` (its softcap,
    sinks, scaling and position bias included) with the chunk's rows of the mask and of
    any position bias; keys that the mask hides from every row of the chunk (the future,
    in a causal layer) are left out of it. Rows are independent, so the output equals
    one call's (eager attention's, to float rounding).

    Returns:
        attn_output (B, L_q, H, d_v).
    """
    eager = eager_attention(call.module)
    attention_mask = call.attention_mask
    length_q, length_k = int(call.query.shape[2]), int(call.key.shape[2])
    bias = call.kwargs.get(POSITION_BIAS)
    per_row = attention_mask is not None and attention_mask.shape[-2] > 1
    parts = []
    chunks = observer.row_chunks(length_q, length_k, call.num_heads, call.query.device)
    for start, stop in chunks:
        check_cancelled()
        keys = length_k
        mask = mask_rows(attention_mask, slice(start, stop))  # the chunk's rows: no L x L copy
        if per_row:  # the last key any row of the chunk sees
            assert mask is not None
            seen = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
            columns = seen.reshape(-1, length_k).any(dim=0).nonzero()
            keys = max(1, int(columns[-1]) + 1) if columns.numel() else 1
        if mask is not None:
            mask = mask[..., :keys]
        kwargs = dict(call.kwargs)
        if isinstance(bias, torch.Tensor):
            rows = bias if bias.shape[-2] == 1 else bias[..., start:stop, :]
            kwargs[POSITION_BIAS] = rows[..., :keys]
        output, weights = eager(
            call.module, call.query[:, :, start:stop], call.key[:, :, :keys],
            call.value[:, :, :keys], mask, scaling=call.scaling, dropout=0.0, **kwargs,
        )  # fmt: skip
        if weights is None:
            raise RuntimeError(f"{type(call.module).__name__}'s eager attention gave no weights")
        observer.take(start, stop, weights)
        parts.append(output)
        del weights
    observer.layer_done()
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


class _KeyScaled:
    """An observer's view of scaled weights: each chunk times a per-key factor (B, H, 1, L_k)."""

    def __init__(self, observer: AttentionObserver, scale: torch.Tensor) -> None:
        self.observer, self.scale = observer, scale.float()

    def wants(self, module: nn.Module) -> bool:
        return self.observer.wants(module)

    def row_chunks(
        self, length_q: int, length_k: int, num_heads: int, device: torch.device
    ) -> list[tuple[int, int]]:
        return self.observer.row_chunks(length_q, length_k, num_heads, device)

    def take(self, start: int, stop: int, weights: torch.Tensor) -> None:
        if self.scale.device != weights.device:
            self.scale = self.scale.to(weights.device)
        self.observer.take(start, stop, weights.float() * self.scale[..., : weights.shape[-1]])

    def layer_done(self) -> None:
        self.observer.layer_done()


def replayed(observer: AttentionObserver, recording: AttentionRecording, index: int) -> None:
    """A recorded call's maps handed to ``observer`` in its row chunks, as its pass would.

    The weights are computed as during an observed pass (:func:`observed_attention`, the
    model's eager attention on the recorded query and key states, without the values),
    sliced from the kept weights of a :class:`.calls.WeightsRecording`, and scaled per
    key where the recording's maps are not the weights themselves
    (:meth:`.calls.AttentionRecording.key_scale`: norm-based attention). So a kept pass is
    shown by the same code as one observed while it runs; ``observer.wants`` is not asked.

    Args:
        observer: takes (B, H, rows, L_k' <= L_k) chunks, then ``layer_done``.
        recording: a recorded pass.
        index: the call (layer) in ``recording.calls``.

    Raises:
        ComputeCancelledError: the computation was cancelled (between chunks).
    """
    call = recording.calls[index]
    scale = recording.key_scale(index)
    if scale is not None:
        observer = _KeyScaled(observer, scale)
    if isinstance(recording, WeightsRecording):
        weights = recording.weights[index]
        length_q, length_k = weights.shape[-2:]
        chunks = observer.row_chunks(length_q, length_k, call.num_heads, weights.device)
        for start, stop in chunks:
            check_cancelled()
            observer.take(start, stop, weights[:, :, start:stop])
        observer.layer_done()
        return
    with torch.inference_mode():
        observed_attention(observer, replace(call, value=call.value[..., :0]))


def attention_with_lse(
    call: AttentionCall, dropout: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """attn_output of a call and each row's log-sum-exp, from the kernel that computes the output.

    On a CUDA device, a plainly causal (or unmasked) call in half precision runs PyTorch's
    flash kernel, which returns the LSE with the output (:func:`_cuda_flash_with_lse`). On
    the CPU, where SDPA itself would run and nothing needs the model's eager attention,
    PyTorch's flash kernel for the CPU (``aten._scaled_dot_product_flash_attention_for_cpu``,
    the kernel SDPA dispatches to there) returns both at once, so keeping the LSE costs
    nothing: a plainly causal call as one call with the causal flag, any other mask in
    chunks of :data:`QUERY_CHUNK` rows (the mask's rows, in the query's dtype). Elsewhere
    (another device, a softcap or sinks that need the model's eager attention, a position
    bias) the output is :func:`computed`'s and the LSE is recomputed from the scores in
    chunks of rows (:func:`.tiles.row_lse`): the same numbers, one more Q·Kᵀ.

    LSE_i = log Σ_j exp(s_ij), s_ij the row's scores after scaling and every score term,
    masked keys left out (FlashAttention's ``softmax_lse``, Dao et al. 2022, Algorithm 1;
    with learned sinks, their logit is a term of the sum).

    Returns:
        attn_output (B, L_q, H, d_v) as transformers' ``sdpa_attention_forward``, and the
        LSE (B, H, L_q) float32. A row that sees no key has an LSE of -inf (recomputed)
        or the kernel's finite stand-in: its tile weights are 0 either way.
    """
    query = call.query
    form = _flash_form(call) if dropout == 0.0 else None
    if form is not None and query.device.type == "cuda":
        on_gpu = _cuda_flash_with_lse(call, form)
        if on_gpu is not None:
            return on_gpu
    cpu_types = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
    if form is None or query.device.type != "cpu" or query.dtype not in cpu_types:
        output = computed(call, dropout)
        return output, row_lse(call)
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    length = int(query.shape[2])
    mask, causal_flag, key, value = form

    def additive(rows: slice | None) -> torch.Tensor | None:
        """The mask's rows as the kernel takes them: additive, in the query's dtype."""
        part = mask_rows(mask, rows)
        if part is not None and part.dtype == torch.bool:
            lowest = torch.finfo(query.dtype).min
            return torch.zeros((), dtype=query.dtype).masked_fill(~part, lowest)
        return None if part is None else part.to(query.dtype)

    if mask is None or length <= QUERY_CHUNK:
        output, lse = flash(
            query, key, value, 0.0, causal_flag, attn_mask=additive(None), scale=call.scaling
        )
        return output.transpose(1, 2).contiguous(), lse.float()
    outputs, lses = [], []
    for start in range(0, length, QUERY_CHUNK):
        check_cancelled()
        rows = slice(start, start + QUERY_CHUNK)
        part_mask = additive(rows)
        part, lse = flash(
            query[:, :, rows], key, value, 0.0, False, attn_mask=part_mask, scale=call.scaling
        )
        outputs.append(part)
        lses.append(lse.float())
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), torch.cat(lses, dim=2)


FlashForm = tuple[torch.Tensor | None, bool, torch.Tensor, torch.Tensor]
"""How a flash kernel runs a call: its mask (None: none or the causal flag), the causal
flag, and the keys and values (cut to the queries' length with the causal flag)."""


def _flash_form(call: AttentionCall) -> FlashForm | None:
    """The call as SDPA's own kernels run it, or None where only eager attention can.

    None for a softcap or sinks (:func:`needs_eager`), a position bias, or values of another
    width than the keys. A call without a mask takes the module's causal flag for a square
    call, as transformers' ``sdpa_attention_forward`` does; a plainly causal mask becomes
    the causal flag (:func:`_plainly_causal`); any other mask stays.
    """
    query, key, value, module = call.query, call.key, call.value, call.module
    if needs_eager(module, call.kwargs) or call.kwargs.get(POSITION_BIAS) is not None:
        return None
    if key.shape[-1] != value.shape[-1]:
        return None
    length = int(query.shape[2])
    mask, causal = call.attention_mask, False
    if mask is None:
        causal = length > 1 and bool(
            call.kwargs.get("is_causal", getattr(module, "is_causal", True))
        )
    elif _plainly_causal(call):
        mask, causal = None, True
    if causal and int(key.shape[2]) > length:
        key, value = key[:, :, :length], value[:, :, :length]
    return mask, causal, key, value


_CUDA_FLASH_FAILED: list[str] = []
"""Why the CUDA flash path was given up in this process (its first failure), if it was."""


def _cuda_flash_with_lse(
    call: AttentionCall, form: FlashForm
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """attn_output and LSE of a call by PyTorch's CUDA flash kernel, or None where it cannot.

    For calls SDPA would send to its flash kernel (``form``: :func:`_flash_form`) with no
    mask but the causal flag, float16 or bfloat16 states and a head size up to 256. Key and
    value heads are repeated for grouped-query heads, as transformers' SDPA path does.
    Anything else, and any failure of the private op (its signature is PyTorch's own and may
    change between releases; the first failure is kept in :data:`_CUDA_FLASH_FAILED` and
    the path is not tried again), gives None: the caller computes the output by SDPA and
    the LSE from the scores.
    """
    query = call.query
    mask, causal, key, value = form
    if _CUDA_FLASH_FAILED or query.dtype not in (torch.float16, torch.bfloat16):
        return None
    if mask is not None or int(query.shape[-1]) > 256:
        return None
    group = call.group_size
    if group > 1:
        key = key.repeat_interleave(group, dim=1)
        value = value.repeat_interleave(group, dim=1)
    try:
        found = torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, 0.0, causal, False, scale=call.scaling
        )
        output, lse = found[0], found[1]
        if tuple(lse.shape) != tuple(query.shape[:3]) or output.shape != query.shape:
            raise RuntimeError(f"unexpected shapes {tuple(output.shape)}, {tuple(lse.shape)}")
    except torch.OutOfMemoryError:
        raise  # the device's memory, not the op: admission and the 503 handle it
    except (RuntimeError, TypeError, NotImplementedError) as error:
        _CUDA_FLASH_FAILED.append(f"{type(error).__name__}: {error}")
        return None
    return output.transpose(1, 2).contiguous(), lse.float()


def replay_kept(observer: AttentionObserver, kept: KeptPass, index: int) -> None:
    """A kept layer's exact weights handed to ``observer`` in its row chunks, as a pass would.

    Each chunk is the tile of its rows at factor 1 over the keys up to the last one any
    of its rows sees (:class:`.computing.AttentionObserver`'s ``take``: L_k' <= L_k), so a
    kept pass is shown by the same pipeline as a pass observed while it runs, with no
    forward pass.

    Raises:
        TileError: the layer's attention is not reproduced by tiles (its class named).
        ComputeCancelledError: the computation was cancelled (between chunks).
    """
    layer = kept.layers[index]
    if layer.refusal is not None:
        raise TileError(layer.refusal)
    _, heads, length_q, length_k = layer.shape
    every = range(heads)
    for start, stop in observer.row_chunks(length_q, length_k, heads, layer.query.device):
        check_cancelled()
        rows = range(start, stop)
        keys = last_key(layer, rows) + 1
        observer.take(start, stop, tile_weights(layer, every, rows, range(keys)))
    observer.layer_done()
