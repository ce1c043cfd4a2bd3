"""Attention flow (attnviz.pretrained.methods) against two independent max-flow computations.

networkx's preflow-push on float capacities (the library Abnar & Zuidema's own code uses),
and, on graphs small enough, a brute force over every cut: by max-flow min-cut, the
maximum flow is the smallest capacity of the edges leaving a set of nodes that holds the
source and not the sink.
"""

import itertools

import networkx as nx
import pytest
import torch
from attnviz.pretrained.methods import attention_flow, flow_token_limit


def residual(head_means: torch.Tensor) -> torch.Tensor:
    """Â = (A + I) / row sums, in float64."""
    adjusted = head_means.double() + torch.eye(head_means.shape[-1], dtype=torch.float64)
    return adjusted / adjusted.sum(dim=-1, keepdim=True)


def edges(head_means: torch.Tensor) -> dict[tuple[tuple[int, int], tuple[int, int]], float]:
    """(layer l, token j) -> (layer l + 1, token i) with capacity Â_l[i, j] > 0."""
    adjusted = residual(head_means)
    layers, length, _ = adjusted.shape
    return {
        ((layer, j), (layer + 1, i)): float(adjusted[layer, i, j])
        for layer in range(layers)
        for i in range(length)
        for j in range(length)
        if adjusted[layer, i, j] > 0
    }


def networkx_flow(head_means: torch.Tensor) -> torch.Tensor:
    graph = nx.DiGraph()
    for (u, v), capacity in edges(head_means).items():
        graph.add_edge(u, v, capacity=capacity)
    layers, length, _ = head_means.shape
    flows = torch.tensor(
        [
            [nx.maximum_flow_value(graph, (0, j), (layers, i)) for j in range(length)]
            for i in range(length)
        ],
        dtype=torch.float64,
    )
    return flows / flows.sum(dim=1, keepdim=True)


def min_cut_flow(head_means: torch.Tensor) -> torch.Tensor:
    """Every cut enumerated: 2 ** (nodes - 2) sets per (source, sink) pair."""
    capacities = edges(head_means)
    layers, length, _ = head_means.shape
    nodes = [(layer, t) for layer in range(layers + 1) for t in range(length)]
    flows = torch.zeros(length, length, dtype=torch.float64)
    for i, j in itertools.product(range(length), repeat=2):
        source, sink = (0, j), (layers, i)
        others = [n for n in nodes if n not in (source, sink)]
        best = float("inf")
        for picks in itertools.product((False, True), repeat=len(others)):
            side = {source} | {n for n, pick in zip(others, picks, strict=True) if pick}
            cut = sum(c for (u, v), c in capacities.items() if u in side and v not in side)
            best = min(best, cut)
        flows[i, j] = best
    return flows / flows.sum(dim=1, keepdim=True)


def random_means(layers: int, length: int, seed: int, causal: bool = False) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(layers, length, length, generator=generator) * 2
    if causal:
        scores = scores.masked_fill(~torch.ones(length, length).tril().bool(), float("-inf"))
    return scores.softmax(dim=-1)


@pytest.mark.parametrize("causal", [False, True])
def test_flow_equals_the_minimum_cut_of_every_pair_on_a_tiny_graph(causal: bool) -> None:
    means = random_means(2, 3, seed=1, causal=causal)
    expected = min_cut_flow(means)
    got = attention_flow(means).double()
    assert (got - expected).abs().max().item() <= 1e-6
    assert got.sum(dim=1) == pytest.approx([1.0] * 3)
    if causal:  # a token after the last layer draws on no later input token
        assert got.triu(diagonal=1).abs().max().item() == 0


@pytest.mark.parametrize(("layers", "length", "seed"), [(3, 6, 2), (6, 9, 3)])
def test_flow_equals_networkx_preflow_push(layers: int, length: int, seed: int) -> None:
    means = random_means(layers, length, seed)
    got = attention_flow(means).double()
    assert (got - networkx_flow(means)).abs().max().item() <= 1e-6
    # Not rollout: flow and the product of the residual-adjusted means differ.
    rollout = torch.linalg.multi_dot(list(residual(means).flip(0)))
    assert (got - rollout).abs().max().item() > 1e-3


def test_the_flow_bound_shrinks_with_depth() -> None:
    assert flow_token_limit(6) == 35 and flow_token_limit(30) == 24
    assert all(n * flow_token_limit(n) ** 4 <= 10_000_000 for n in range(1, 100))
