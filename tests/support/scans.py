"""Source scans for the registries' tests: comparisons of a name with a registered literal."""

from __future__ import annotations

import ast
from collections.abc import Collection


def literal_names(node: ast.AST, names: Collection[str]) -> set[str]:
    """The ``names`` a constant or a tuple, list or set of constants holds."""
    values = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {v.value for v in values if isinstance(v, ast.Constant) and v.value in names}


def mentions(node: ast.AST, word: str) -> bool:
    """Whether a name or attribute in ``node`` has ``word`` in it (case-insensitive)."""
    return any(
        word in (n.id if isinstance(n, ast.Name) else n.attr).lower()
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    )


def compared_names(node: ast.Compare, names: Collection[str], word: str) -> set[str]:
    """The ``names`` a comparison holds as literals when one of its sides mentions ``word``."""
    sides = [node.left, *node.comparators]
    found = set().union(*(literal_names(side, names) for side in sides))
    return found if found and any(mentions(side, word) for side in sides) else set()
