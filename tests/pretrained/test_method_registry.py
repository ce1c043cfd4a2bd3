"""The method registry is the one place a method is described and branched on.

Every name of :data:`attnviz.pretrained.methods.Method` has one :class:`MethodSpec`; the
request schema, the /models page's config and the CLI read it; and no module outside the
registry's package compares a method's name with a literal (a source scan of app/).
"""

from __future__ import annotations

import ast
import json
import re
import typing
from pathlib import Path

import pytest
from attnviz.attention.errors import AttentionInputError
from attnviz.pretrained.methods import (
    DRAWN_METHODS,
    GRADIENT_METHODS,
    METHOD_LABELS,
    METHODS,
    ONE_INPUT_METHODS,
    Method,
    method_description,
    method_spec,
)

from tests.support.scans import compared_names

APP = Path(__file__).resolve().parents[2] / "app"
REGISTRY_PACKAGE = APP / "pretrained" / "methods"


def test_every_method_name_has_one_spec_named_after_it() -> None:
    assert tuple(METHODS) == typing.get_args(Method)
    assert all(spec.name == name for name, spec in METHODS.items())
    with pytest.raises(AttentionInputError) as raised:
        method_spec("attention_flow")
    assert raised.value.field == "method"


def test_the_sets_the_checks_use_follow_the_specs() -> None:
    assert {"grad_rollout", "head_importance"} == GRADIENT_METHODS
    assert {"flow", "value_zeroing", *GRADIENT_METHODS} == ONE_INPUT_METHODS
    assert DRAWN_METHODS == ("attention", "norm")
    # what the page offers: every method with a label, rollout (drawn in every view) not
    assert "rollout" not in METHOD_LABELS and set(METHOD_LABELS) == set(METHODS) - {"rollout"}
    for name in GRADIENT_METHODS:  # the gradient note is said once, in the registry
        assert "target T" in METHODS[name].note


def method_name_branches(source: str) -> list[tuple[int, str]]:
    """(line, names) of each comparison of a method with a method's name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and (names := compared_names(node, METHODS, "method")):
            found.append((node.lineno, ", ".join(sorted(names))))
    return found


def test_the_scan_finds_a_branch_on_a_method_name() -> None:
    branches = method_name_branches(
        'if options.method == "flow":\n    pass\nif method in ("norm", "rollout"):\n    pass\n'
        'if mode == "flow":\n    pass\n'
    )
    assert branches == [(1, "flow"), (3, "norm, rollout")]


def test_no_module_outside_the_registry_branches_on_a_method_name() -> None:
    outside = [
        (path.relative_to(APP), line, names)
        for path in sorted(APP.rglob("*.py"))
        if REGISTRY_PACKAGE not in path.parents
        for line, names in method_name_branches(path.read_text(encoding="utf-8"))
    ]
    assert outside == []


def test_the_request_schema_and_the_page_read_the_registry(client: typing.Any) -> None:
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert schema["PretrainedAttentionRequest"]["properties"]["method"]["description"] == (
        method_description()
    )
    page = client.get("/models").text
    config = re.search(r'<script id="models-config" type="application/json">(.*?)</script>', page)
    assert config is not None
    offered = json.loads(config.group(1))["method_specs"]
    assert [m["name"] for m in offered] == list(METHOD_LABELS)
    for entry in offered:
        spec = METHODS[entry["name"]]
        assert (entry["label"], entry["note"], entry["gradient"], entry["assumes_weights"]) == (
            spec.label,
            spec.note,
            spec.gradient,
            spec.assumes_weights,
        )
        assert entry["views"] == (None if spec.views is None else list(spec.views))


JS = APP.parent / "static" / "js"
JS_REGISTRY = JS / "models" / "methods.js"  # how the page draws each method's own map


def js_method_branches(source: str) -> list[str]:
    """Comparisons of a method (a name with "method" in it) with a method's name in ``source``."""
    names = "|".join(METHODS)
    method = r"[\w.]*[mM]ethod[\w.]*"
    pattern = (
        rf"""{method}\s*[=!]==\s*["'](?:{names})["']|["'](?:{names})["']\s*[=!]==\s*{method}"""
    )
    return re.findall(pattern, source)


def test_no_page_module_but_the_pages_method_registry_branches_on_a_method_name() -> None:
    found = js_method_branches(
        'if (res.method === "flow") x(); y = "norm" !== methodSelect.value; z = map === "rollout";'
    )
    assert found == ['res.method === "flow"', '"norm" !== methodSelect.value']
    outside = {
        str(path.relative_to(JS)): found
        for path in sorted(JS.rglob("*.js"))
        if path != JS_REGISTRY and "vendor" not in path.parts
        if (found := js_method_branches(path.read_text(encoding="utf-8")))
    }
    assert outside == {}
