"""Attention flow (Abnar & Zuidema, "Quantifying Attention Flow in Transformers", ACL 2020).

The layers as a network whose capacities are the residual-adjusted head means; the
maximum flow from each input token to each token after the last layer. L**2 max-flow
problems, so computed for short inputs only (:data:`MAX_FLOW_WORK`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import torch

from ...attention.errors import AttentionInputError

if TYPE_CHECKING:
    from ..blocks import Block
    from ..results import PretrainedAttentions

FLOW_SCALE: Final = 2**24
"""Attention flow's capacities are integers (SciPy's max-flow): weight x 2**24, rounded.
Each capacity is then off by at most 3e-8, and a flow by at most that times the edges of a
minimum cut (L of them): about 1e-6 at 32 tokens."""

MAX_FLOW_WORK: Final = 10_000_000
"""Attention flow solves L**2 max-flow problems on N * L**2 edges; the API computes it while
N * L**4 stays within this (about 1 s on this 2-core machine): up to 35 tokens through
MiniLM's 6 layers, 24 through SmolLM2's 30."""


def flow_token_limit(num_layers: int) -> int:
    """The longest input whose attention flow the API computes through ``num_layers`` layers."""
    return int((MAX_FLOW_WORK / max(1, num_layers)) ** 0.25)


def attention_flow(head_means: torch.Tensor) -> torch.Tensor:
    """Attention flow (Abnar & Zuidema, "Quantifying Attention Flow in Transformers", ACL 2020).

    The layers form a graph: node (l, t) is token t after layer l (l = 0: the input), and
    (l, j) -> (l + 1, i) has capacity Â_l[i, j], the residual-adjusted head mean
    Â = (A + I) / its row sums (0.5 A + 0.5 I where rows of A sum to 1), as rollout uses.
    Flow[i, j] is the maximum flow from input token j to token i after the last layer;
    each row i is then divided by its sum, as the authors' ``compute_flows`` does. Solved
    with SciPy's Dinic max-flow on integer capacities (:data:`FLOW_SCALE`): L**2 problems.

    Args:
        head_means: (N, L, L) head-averaged weights of every layer, first layer first.

    Returns:
        (L, L) float32; rows sum to 1 (a row with no flow at all stays 0).
    """
    import numpy as np
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import maximum_flow

    layers, length, _ = head_means.shape
    adjusted = head_means.double() + torch.eye(length, dtype=torch.float64)
    adjusted = adjusted / adjusted.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    capacity = (adjusted * FLOW_SCALE).round().to(torch.int64).numpy()  # (N, i, j)
    layer, i, j = np.nonzero(capacity)
    graph = csr_array(
        (
            capacity[layer, i, j].astype(np.int32),
            (layer * length + j, (layer + 1) * length + i),
        ),
        shape=((layers + 1) * length,) * 2,
    )
    flows = np.zeros((length, length))
    for out in range(length):
        sink = layers * length + out
        for source in range(length):
            flows[out, source] = maximum_flow(graph, source, sink, method="dinic").flow_value
    totals = flows.sum(axis=1, keepdims=True)
    flows = np.divide(flows, totals, out=np.zeros_like(flows), where=totals > 0)
    return torch.from_numpy(flows).float()


def flow_map(result: PretrainedAttentions, block: Block) -> tuple[torch.Tensor, int]:
    """Attention flow (:func:`attention_flow`) of ``block`` for the one input, what fits.

    The whole input when it is at most :func:`flow_token_limit` tokens; else its last
    ``flow_token_limit`` tokens, the window of positions ``start`` .. L - 1: the graph's
    nodes are those tokens, its capacities their head means among themselves (their
    weights on earlier keys left out), residual-adjusted and renormalised as for the
    whole input.

    Returns:
        ((1, W, W) float32 flow, rows summing to 1; ``start``, 0 for the whole input).

    Raises:
        AttentionInputError: (field ``block``) cross attention (not square).
    """
    if block == "cross":
        raise AttentionInputError(
            "block", "attention flow runs through square self-attention: not 'cross'"
        )
    layers = result.num_layers(block)
    means = torch.stack(
        [result.layer_weights(block, layer)[0].mean(dim=0) for layer in range(layers)]
    )
    start = max(0, means.shape[-1] - flow_token_limit(layers))
    return attention_flow(means[:, start:, start:])[None], start
