"""Block pooling against PyTorch's own pooling and a brute-force loop over the blocks."""

import math

import pytest
import torch
from attnviz.attention.pooling import block_factor, block_reduce
from torch.nn import functional as F  # noqa: N812

SHAPES = [(10, 7, 3, 2), (64, 64, 8, 8), (5, 9, 1, 4), (13, 13, 13, 13), (7, 3, 2, 5), (1, 1, 1, 1)]


@pytest.mark.parametrize(("rows", "columns", "factor_q", "factor_k"), SHAPES)
def test_max_and_mean_equal_torch_pooling_with_partial_blocks(
    rows: int, columns: int, factor_q: int, factor_k: int
) -> None:
    maps = torch.rand(2, 3, rows, columns, generator=torch.Generator().manual_seed(rows))
    flat = maps.reshape(6, 1, rows, columns)
    shape = (2, 3, math.ceil(rows / factor_q), math.ceil(columns / factor_k))
    kernel = (factor_q, factor_k)
    expected_max = F.max_pool2d(flat, kernel, ceil_mode=True).reshape(shape)
    expected_mean = F.avg_pool2d(flat, kernel, ceil_mode=True, count_include_pad=False)
    assert torch.equal(block_reduce(maps, factor_q, factor_k, "max"), expected_max)
    torch.testing.assert_close(
        block_reduce(maps, factor_q, factor_k, "mean"), expected_mean.reshape(shape)
    )


@pytest.mark.parametrize(("rows", "columns", "factor_q", "factor_k"), SHAPES)
def test_rows_and_columns_reduce_each_their_own_way(
    rows: int, columns: int, factor_q: int, factor_k: int
) -> None:
    # Whisper's frame maps: keys summed within a cell, queries averaged.
    maps = torch.rand(rows, columns, dtype=torch.float64)
    pooled = block_reduce(maps, factor_q, factor_k, rows="mean", columns="sum")
    for i in range(math.ceil(rows / factor_q)):
        for j in range(math.ceil(columns / factor_k)):
            block = maps[i * factor_q : (i + 1) * factor_q, j * factor_k : (j + 1) * factor_k]
            expected = block.sum(dim=1).mean()
            torch.testing.assert_close(pooled[i, j], expected, rtol=1e-12, atol=0)
    assert pooled.dtype == torch.float64
    # Each row's total weight is kept: a row of weights summing to 1 pools to rows of 1.
    rows_of_one = torch.softmax(maps, dim=-1)
    totals = block_reduce(rows_of_one, factor_q, factor_k, "mean", "sum").sum(dim=-1)
    torch.testing.assert_close(totals, torch.ones_like(totals))


def test_block_factor_fits_the_length_in_at_most_size_blocks() -> None:
    for length in range(1, 300):
        for size in (1, 7, 64, 512):
            factor = block_factor(length, size)
            assert math.ceil(length / factor) <= size
            assert factor == 1 or math.ceil(length / (factor - 1)) > size
