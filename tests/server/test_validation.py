"""What the API refuses and how it says so: mask_fill outside its dtype, lone surrogates,
booleans as integers, exact integer bounds in the schema, deep nesting, huge inputs,
plain messages.

Defects found from outside (issue 12), each as a test that failed before its fix; the
float64 one is in tests/server/test_transport.py.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from attnviz.attention import compute_attention
from fastapi.testclient import TestClient

ENDPOINTS: list[tuple[str, dict[str, Any]]] = [
    ("/api/v1/attention", {"sequences": [[1, 2, 0]]}),
    ("/api/v1/lessons/scaling", {"d_k_values": [8]}),
    ("/api/v1/lessons/decoding", {"sequence": "a b c"}),
    ("/api/v1/lessons/transformer", {"sequences": [[1, 2, 0]], "num_layers": 1}),
    ("/api/v1/models/attention", {"texts": ["The cat sat."]}),
]
"""Every POST endpoint with a small valid body."""


def post_raw(client: TestClient, path: str, raw: bytes) -> Any:
    return client.post(path, content=raw, headers={"content-type": "application/json"})


def locs(response: Any) -> list[list[Any]]:
    return [entry["loc"] for entry in response.json()["detail"]]


# mask_fill outside what the dtype can hold -------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("fill", [-1e39, -1e300, -3.5e38])
def test_mask_fill_below_float32_is_422_naming_it_with_the_range(
    api: TestClient, dtype: str, fill: float
) -> None:
    body = {"sequences": [[1, 2, 0]], "mask_fill": fill, "dtype": dtype}
    response = api.post("/api/v1/attention", json=body)
    assert response.status_code == 422, response.text
    assert locs(response) == [["body", "mask_fill"]]
    assert "[-3.4028235e+38, 0]" in response.json()["detail"][0]["msg"]


def test_the_lowest_float32_fill_gives_the_tutorials_weights(api: TestClient) -> None:
    """At the edge of the range the fill works, and equals the tutorials' -1e9 rule."""
    lowest = float(np.finfo(np.float32).min)
    batch = [[1, 2, 0], [0, 0, 0]]
    body = {"sequences": batch, "mask_fill": lowest, "mask": "padding"}
    response = api.post("/api/v1/attention", json=body)
    assert response.status_code == 200, response.text
    expected = compute_attention(batch, mask="padding", mask_fill=-1e9).attn_weights
    assert np.array_equal(np.array(response.json()["weights"], dtype=np.float32), expected)


# Strings that are not valid Unicode -----------------------------------------------------

SURROGATE_CASES: list[tuple[str, bytes, list[Any]]] = [
    ("/api/v1/attention", rb'{"sequences": ["a \ud800 b"]}', ["body", "sequences", 0]),
    ("/api/v1/attention", rb'{"sequences": [[1]], "device": "\udfff"}', ["body", "device"]),
    ("/api/v1/attention", rb'{"sequences": [[1]], "\ud800": 1}', ["body", "\\ud800"]),
    ("/api/v1/attention", rb'{"sequences": [[1]], "mask_fill": "\ud800"}', ["body", "mask_fill"]),
    ("/api/v1/lessons/decoding", rb'{"sequence": "\ud834 x"}', ["body", "sequence"]),
    (
        "/api/v1/lessons/transformer",
        rb'{"sequences": ["a"], "targets": ["\udc00"]}',
        ["body", "targets", 0],
    ),
    ("/api/v1/lessons/scaling", rb'{"\udbff": [8]}', ["body", "\\udbff"]),
    ("/api/v1/models/attention", rb'{"texts": ["x \ud800"]}', ["body", "texts", 0]),
    ("/api/v1/models/attention", rb'{"texts": ["x"], "model": "\ud800"}', ["body", "model"]),
    (
        "/api/v1/models/attention",
        rb'{"texts": ["x"], "text_pairs": ["\udabc"]}',
        ["body", "text_pairs", 0],
    ),
]


@pytest.mark.parametrize(("path", "raw", "loc"), SURROGATE_CASES)
def test_a_lone_surrogate_is_422_naming_the_field_and_never_echoed(
    api: TestClient, path: str, raw: bytes, loc: list[Any]
) -> None:
    response = post_raw(api, path, raw)
    assert response.status_code == 422, response.text
    response.content.decode("utf-8")  # the body is valid UTF-8
    detail = response.json()["detail"]
    assert [entry["loc"] for entry in detail] == [loc]
    assert "lone UTF-16 surrogate" in detail[0]["msg"]
    assert "input" not in detail[0]


def test_a_valid_surrogate_pair_is_an_ordinary_character(api: TestClient) -> None:
    """\\ud83d\\ude00 is one character (😀): a word like any other."""
    response = post_raw(api, "/api/v1/attention", rb'{"sequences": ["\ud83d\ude00 cat"]}')
    assert response.status_code == 200, response.text
    assert response.json()["key_labels"] == [["😀", "cat"]]


def test_a_lone_surrogate_in_a_query_parameter_is_refused_too(api: TestClient) -> None:
    # A percent-encoded lone surrogate is not UTF-8: Starlette decodes it to U+FFFD,
    # an ordinary character, so the parameter is merely not an integer.
    response = api.get("/api/v1/lessons/parameters?d_model=%ED%A0%80")
    assert response.status_code == 422
    assert locs(response) == [["query", "d_model"]]


# Booleans are not integers; integer bounds are integers -----------------------------

INTEGER_FIELDS: list[tuple[str, dict[str, Any], str]] = [
    ("/api/v1/attention", {"sequences": [[1, 2]]}, name)
    for name in ("pad_id", "seed", "d_model", "num_heads", "vocab_size", "dropout_seed")
] + [
    ("/api/v1/attention", {"sequences": [[1, 2]]}, "display_size"),
    ("/api/v1/attention", {"sequences": [[1, 2]]}, "sequence_index"),
    ("/api/v1/lessons/scaling", {}, "seed"),
    ("/api/v1/lessons/scaling", {}, "length"),
    ("/api/v1/lessons/decoding", {"sequence": "a b"}, "pad_id"),
    ("/api/v1/lessons/transformer", {"sequences": [[1, 2]]}, "num_layers"),
    ("/api/v1/lessons/transformer", {"sequences": [[1, 2]]}, "pad_id"),
    ("/api/v1/models/attention", {"texts": ["a"]}, "sequence_index"),
    ("/api/v1/models/attention", {"texts": ["a"]}, "layer_index"),
]


@pytest.mark.parametrize("value", [False, True])
@pytest.mark.parametrize(("path", "body", "field"), INTEGER_FIELDS)
def test_a_boolean_is_not_an_integer(
    api: TestClient, path: str, body: dict[str, Any], field: str, value: bool
) -> None:
    response = api.post(path, json={**body, field: value})
    assert response.status_code == 422, response.text
    assert ["body", field] in locs(response)


@pytest.mark.parametrize("value", [1, 0, "true"])
def test_a_number_or_string_is_not_a_boolean(api: TestClient, value: Any) -> None:
    response = api.post("/api/v1/attention", json={"sequences": [[1]], "verify": value})
    assert response.status_code == 422
    assert locs(response) == [["body", "verify"]]


def test_integer_bounds_in_the_schema_are_exact_integers(api: TestClient) -> None:
    text = api.get("/openapi.json").text
    schema = json.loads(text)
    seed = schema["components"]["schemas"]["AttentionRequest"]["properties"]["seed"]
    assert seed["maximum"] == 2**63 - 1 and isinstance(seed["maximum"], int)
    assert '"maximum":9223372036854775807' in text.replace(" ", "")
    assert "e+18" not in text
    # The bound is the server's: 2**63 - 1 is accepted, 2**63 refused.
    ok = api.post("/api/v1/attention", json={"sequences": [[1]], "seed": 2**63 - 1})
    assert ok.status_code == 200
    over = api.post("/api/v1/attention", json={"sequences": [[1]], "seed": 2**63})
    assert over.status_code == 422


def test_conditions_the_schema_cannot_express_are_in_descriptions_and_422_is_documented(
    api: TestClient,
) -> None:
    schema = api.get("/openapi.json").json()
    props = schema["components"]["schemas"]["AttentionRequest"]["properties"]
    assert "divide" in props["num_heads"]["description"]
    assert "422" in props["device"]["description"]
    assert "vocab_size" in props["pad_id"]["description"]
    model_props = schema["components"]["schemas"]["PretrainedAttentionRequest"]["properties"]
    assert "One entry per text" in model_props["text_pairs"]["description"]
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method == "post":
                assert "422" in operation["responses"], (path, method)


# Errors that never become 500s --------------------------------------------------------


@pytest.mark.parametrize("depth", [900, 5_000, 100_000])
@pytest.mark.parametrize(("path", "field"), [("/api/v1/attention", "sequences")])
def test_deep_nesting_is_a_4xx_naming_a_field(
    api: TestClient, path: str, field: str, depth: int
) -> None:
    raw = b'{"' + field.encode() + b'": ' + b"[" * depth + b"]" * depth + b"}"
    response = post_raw(api, path, raw)
    assert 400 <= response.status_code < 500, response.status_code
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail[0]["loc"][0] == "body"


def test_huge_inputs_are_not_echoed_back(api: TestClient) -> None:
    body = {"sequences": [[1, 2]], "include": ["q"] * 50_000}
    response = api.post("/api/v1/attention", json=body)
    assert response.status_code == 422
    assert len(response.content) < 10_000


def test_the_plain_message_for_num_heads_lists_the_divisors(api: TestClient) -> None:
    body = {"sequences": [[1, 2]], "d_model": 10, "num_heads": 3}
    detail = api.post("/api/v1/attention", json=body).json()["detail"]
    assert detail == [
        {
            "loc": ["body", "num_heads"],
            "msg": "num_heads must divide d_model (10): try 1, 2, 5 or 10",
            "type": "value_error",
        }
    ]


def test_a_whole_number_is_an_integer_as_json_schema_says(api: TestClient) -> None:
    """The schema says "integer", and 3.0 is one in JSON Schema: same result as 3."""
    as_int = api.post("/api/v1/attention", json={"sequences": [[1, 2]], "seed": 3, "d_model": 8})
    as_float = api.post(
        "/api/v1/attention", json={"sequences": [[1.0, 2.0]], "seed": 3.0, "d_model": 8.0}
    )
    assert as_float.status_code == 200, as_float.text
    assert as_float.json()["weights"] == as_int.json()["weights"]
    scaling = api.post("/api/v1/lessons/scaling", json={"d_k_values": [8.0], "num_samples": 2})
    assert scaling.status_code == 200, scaling.text
    fraction = api.post("/api/v1/attention", json={"sequences": [[1]], "seed": 3.5})
    assert fraction.status_code == 422


def test_the_schema_bounds_the_decoding_lesson_at_its_own_limit(api: TestClient) -> None:
    schema = api.get("/openapi.json").json()
    sequence = schema["components"]["schemas"]["DecodingRequest"]["properties"]["sequence"]
    ids = next(option for option in sequence["anyOf"] if option["type"] == "array")
    assert ids["maxItems"] == 128
    body = {"sequence": list(range(1, 100)) * 2, "vocab_size": 200}
    response = api.post("/api/v1/lessons/decoding", json=body)
    assert response.status_code == 422
    assert locs(response) == [["body", "sequence"]]
