"""The family registry is the one place a model family is described and branched on.

Every name of :data:`attnviz.pretrained.blocks.Family` has one :class:`FamilySpec`; the
model, tokens, generation, gradients, admission and loading code read it, the page reads
its ``family_spec`` from the model's description and from each answer, and no module
outside :mod:`attnviz.pretrained.families` (no page module outside ``models/catalog.js``)
compares a family's name with a literal (source scans of app/ and static/js/). What each
spec says is checked against what tiny models of each family do through the API.
"""

from __future__ import annotations

import ast
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from attnviz.pretrained.blocks import BLOCKS, Family
from attnviz.pretrained.families import FAMILIES, family_spec

from tests.pretrained.support import require_transformers
from tests.pretrained.tiny import FAMILIES as TINY_FAMILIES
from tests.pretrained.tiny import TARGETS, TEXTS, save_tiny
from tests.server.support import serving_model_dirs
from tests.support.api import decode
from tests.support.scans import compared_names, mentions

APP = Path(__file__).resolve().parents[2] / "app"
REGISTRY = APP / "pretrained" / "families.py"
JS = APP.parent / "static" / "js"
JS_REGISTRY = JS / "models" / "catalog.js"  # the page's one reader of family_spec
URL = "/api/v1/models/attention"
KINDS = ("gpt2", "bert", "t5", "bart")
"""One tiny model per family (BART: a decoder whose head count is its own config's)."""


def test_every_family_name_has_one_spec_named_after_it() -> None:
    import transformers

    assert tuple(FAMILIES) == typing.get_args(Family)
    for name, spec in FAMILIES.items():
        assert spec.name == name and family_spec(name) is spec
        assert spec.blocks == BLOCKS[name]
        assert set(spec.output_attentions) == set(spec.blocks)
        assert set(spec.causal_blocks) <= set(spec.blocks)
        assert spec.scored_block in spec.blocks
        assert set(spec.block_shapes) <= set(spec.blocks)
        assert hasattr(transformers, spec.auto_class)
        assert name in spec.described and spec.described.split()[0] in ("a", "an")
    with pytest.raises(KeyError):
        family_spec("speech")  # type: ignore[arg-type]


# The scans ----------------------------------------------------------------------------


def family_name_branches(source: str) -> list[tuple[int, str]]:
    """(line, names) of each comparison of a family with a family's name in ``source``, and
    of each ``family.startswith(...)``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if names := compared_names(node, FAMILIES, "fam"):
                found.append((node.lineno, ", ".join(sorted(names))))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and mentions(node.func.value, "fam")
        ):
            found.append((node.lineno, node.func.attr))
    return found


def test_the_scan_finds_a_branch_on_a_family_name() -> None:
    branches = family_name_branches(
        'if self.family == "decoder":\n    pass\n'
        'if model.family in ("encoder", "encoder-decoder"):\n    pass\n'
        'x = "an" if fam.startswith("e") else "a"\n'
        'if block == "decoder":\n    pass\n'
    )
    assert branches == [(1, "decoder"), (3, "encoder, encoder-decoder"), (5, "startswith")]


def test_no_module_outside_the_registry_branches_on_a_family_name() -> None:
    outside = [
        (str(path.relative_to(APP)), line, names)
        for path in sorted(APP.rglob("*.py"))
        if path != REGISTRY
        for line, names in family_name_branches(path.read_text(encoding="utf-8"))
    ]
    assert outside == []


def js_family_branches(source: str) -> list[str]:
    """Comparisons of a family (a name with "fam" in it) with a family's name in ``source``."""
    names = "|".join(sorted(FAMILIES, key=len, reverse=True))
    family = r"[\w.]*[fF]am[\w.]*(?:\([\w.]*\))?"
    literal = rf"""["'](?:{names})["']"""
    return re.findall(rf"{family}\s*[=!]==?\s*{literal}|{literal}\s*[=!]==?\s*{family}", source)


def test_no_page_module_but_the_catalog_branches_on_a_family_name() -> None:
    found = js_family_branches(
        'if (res.family === "decoder") x(); y = family(m) !== "encoder-decoder"; '
        'z = "encoder" === fam; w = res.block === "decoder"; v = m.family === res.family;'
    )
    assert found == [
        'res.family === "decoder"',
        'family(m) !== "encoder-decoder"',
        '"encoder" === fam',
    ]
    outside = {
        str(path.relative_to(JS)): found
        for path in sorted(JS.rglob("*.js"))
        if path != JS_REGISTRY and "vendor" not in path.parts
        if (found := js_family_branches(path.read_text(encoding="utf-8")))
    }
    assert outside == {}


# What each spec says, against what its models do ----------------------------------------


@pytest.fixture(scope="module")
def family_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A server offering ``tiny-<kind>`` for each of :data:`KINDS`."""
    require_transformers()
    root = tmp_path_factory.mktemp("family-models")
    with serving_model_dirs([save_tiny(kind, root / f"tiny-{kind}") for kind in KINDS]) as c:
        yield c


def _ask(client: Any, kind: str, **fields: Any) -> Any:
    body = {"model": f"tiny-{kind}", "texts": TEXTS[:1], "sequence_index": 0, **fields}
    return client.post(URL, json=body)


@pytest.mark.parametrize("kind", KINDS)
def test_each_spec_says_what_its_models_read_and_give(family_models: Any, kind: str) -> None:
    spec = FAMILIES[TINY_FAMILIES[kind]]
    listing = {m["name"]: m for m in family_models.get("/api/v1/models").json()["models"]}
    info = listing[f"tiny-{kind}"]
    assert info["family"] == spec.name and info["family_spec"] == spec.page()
    assert info["blocks"] == list(spec.blocks) and info["can_generate"] is spec.generates

    targets = {"targets": TARGETS[:1]} if spec.targets else {}
    # targets: required exactly where the spec says (a 422 naming them otherwise)
    other = {} if spec.targets else {"targets": TARGETS[:1]}
    without = _ask(family_models, kind, **other)
    assert without.status_code == 422 and without.json()["detail"][0]["loc"][-1] == "targets"
    # text pairs and generation: taken exactly where the spec says
    paired = _ask(family_models, kind, text_pairs=TEXTS[1:2], **targets)
    assert (paired.status_code == 200) is spec.text_pairs, paired.text
    generated = _ask(family_models, kind, max_new_tokens=2, **targets)
    assert (generated.status_code == 200) is spec.generates, generated.text
    if not spec.generates:
        assert generated.json()["detail"][0]["loc"][-1] == "max_new_tokens"

    for block in spec.blocks:
        response = _ask(family_models, kind, block=block, **targets)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["family_spec"] == spec.page() and answer["block"] == block
        spec_or_list = answer["attentions"]  # (N, 1, H, L_q, L_k), plain JSON or base64
        weights = np.asarray(
            decode(spec_or_list) if isinstance(spec_or_list, dict) else spec_or_list
        )
        square = weights.shape[-1] == weights.shape[-2]
        upper = np.triu(weights[0, 0, 0], k=1) if square else np.ones(1)
        # causal exactly in the spec's causal blocks: nothing above the diagonal
        assert (square and not upper.any()) is (block in spec.causal_blocks), block


# Families AttnViz does not run: refused by name ------------------------------------------


def _tiny_llava_onevision() -> Any:
    import transformers

    vision = transformers.CLIPVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        image_size=30, patch_size=6, projection_dim=16,
    )  # fmt: skip
    text = transformers.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1,
    )  # fmt: skip
    config = transformers.LlavaOnevisionConfig(
        vision_config=vision, text_config=text, image_token_index=63,
        image_grid_pinpoints=[[30, 30], [30, 60]],
    )  # fmt: skip
    return transformers.LlavaOnevisionForConditionalGeneration(config)


VISION_LANGUAGE = {"llava_onevision": _tiny_llava_onevision}
"""Vision-language families AttnViz does not run yet (LLaVA, LLaVA-NeXT, Qwen-VL, Idefics3,
Gemma 3 run:
tests/pretrained/test_vision_language.py)."""


@pytest.fixture(scope="module")
def vision_language_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random LLaVA and Qwen2-VL models saved as folders, with a word tokenizer."""
    require_transformers()
    from tests.pretrained.tiny import DECODER_STYLE, word_tokenizer

    root = tmp_path_factory.mktemp("vision-language")
    folders = {}
    for model_type, build in VISION_LANGUAGE.items():
        folders[model_type] = root / f"tiny-{model_type}"
        build().save_pretrained(folders[model_type])
        word_tokenizer(DECODER_STYLE).save_pretrained(folders[model_type])
    return folders


@pytest.mark.parametrize("model_type", VISION_LANGUAGE)
def test_a_vision_language_model_is_refused_by_name_not_run_as_an_encoder(
    vision_language_folders: dict[str, Path], model_type: str
) -> None:
    """Before, a LLaVA folder was read as an encoder (its architectures name no causal LM)
    and ran its text without the image; now loading it, from a folder or from Python, says
    what it is."""
    from attnviz.pretrained import ModelFormatError, load_model_dir, wrap_model
    from attnviz.pretrained.architectures import family_of, vision_language_type

    folder = vision_language_folders[model_type]
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    assert vision_language_type(config) == model_type
    assert family_of(config) == "vision-language"  # not an encoder that drops the image
    with pytest.raises(ModelFormatError) as raised:
        load_model_dir(f"tiny-{model_type}", folder)
    message = str(raised.value)
    assert message.startswith(f"{folder}: {model_type} is a vision-language model")
    assert "does not run yet" in message and "Traceback" not in message
    with pytest.raises(ModelFormatError, match=f"{model_type} is a vision-language model"):
        wrap_model(VISION_LANGUAGE[model_type](), None)


def test_a_served_vision_language_folder_is_listed_as_failed_with_the_reason(
    vision_language_folders: dict[str, Path],
) -> None:
    with serving_model_dirs(list(vision_language_folders.values())) as client:
        listing = {m["name"]: m for m in client.get("/api/v1/models").json()["models"]}
        for model_type in VISION_LANGUAGE:
            entry = listing[f"tiny-{model_type}"]
            assert entry["state"] == "failed" and entry["family_spec"] is None
            assert f"{model_type} is a vision-language model" in entry["error"]
            response = client.post(URL, json={"model": f"tiny-{model_type}", "texts": ["a cat"]})
            assert response.status_code == 422
            assert "vision-language" in response.json()["detail"][0]["msg"]
