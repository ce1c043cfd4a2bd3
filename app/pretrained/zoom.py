"""Where a zoom tile (z, x, y) of an attention map lies: HiGlass's tiles of a matrix.

Level 0 is the whole L_q x L_k map in one tile of at most :data:`TILE_SIDE` cells a side;
each level halves the tokens a cell holds, and at the deepest level a cell is one token
(Kerpedjiev et al., "HiGlass: web-based visual exploration and analysis of genome
interaction maps", Genome Biology 2018). :func:`.tiles.tile` computes a tile's cells.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

TILE_SIDE: Final = 256
"""Cells per side of a zoom tile (:func:`zoom_span`), as HiGlass serves matrices."""


@dataclass(frozen=True)
class ZoomSpan:
    """Where zoom tile (z, x, y) of an L_q x L_k map lies (:func:`zoom_span`).

    Attributes:
        max_z: the deepest zoom level: one token per cell there.
        factor: tokens per cell side at level z, 2 ** (max_z - z).
        rows: the query rows the tile covers (y's).
        cols: the key columns it covers (x's).
    """

    max_z: int
    factor: int
    rows: range
    cols: range


def max_zoom(length_q: int, length_k: int) -> int:
    """The deepest zoom level of an L_q x L_k map: 2 ** max_z x TILE_SIDE >= its longer side."""
    longest = max(length_q, length_k, 1)
    return max(0, math.ceil(math.log2(longest / TILE_SIDE))) if longest > TILE_SIDE else 0


def zoom_span(length_q: int, length_k: int, z: int, x: int, y: int) -> ZoomSpan:
    """The rows, columns and factor of zoom tile (z, x, y): level z, column x, row y.

    Level 0 is the whole map in one tile (:data:`TILE_SIDE` cells or fewer per side,
    ``factor`` = 2 ** max_z tokens per cell); each level halves the factor, doubling the
    tiles per side; at ``max_z`` a cell is one token. Tile (x, y) covers key columns
    x * TILE_SIDE * factor .. and query rows y * TILE_SIDE * factor .., clipped to the map
    (a last tile may be partial).

    Raises:
        IndexError: z above max_z, or x or y past the map at level z.
    """
    top = max_zoom(length_q, length_k)
    if not 0 <= z <= top:
        raise IndexError(f"z {z} is not in 0..{top} (a {length_q} x {length_k} map)")
    factor = 2 ** (top - z)
    span = TILE_SIDE * factor
    across, down = -(-length_k // span), -(-length_q // span)
    if not 0 <= x < across:
        raise IndexError(f"x {x} is not in 0..{across - 1} at z {z}")
    if not 0 <= y < down:
        raise IndexError(f"y {y} is not in 0..{down - 1} at z {z}")
    rows = range(y * span, min(length_q, (y + 1) * span))
    cols = range(x * span, min(length_k, (x + 1) * span))
    return ZoomSpan(top, factor, rows, cols)
