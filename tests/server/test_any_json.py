"""Any JSON, to every endpoint of the API (hypothesis): never a 5xx, always a valid answer.

The endpoints come from the app's own OpenAPI, so a new one is covered without editing
this file. The bodies are written as raw text by :func:`dump`, so that they can hold
what Python's objects cannot be sent as: lone UTF-16 surrogates (``"\\ud800"``),
``NaN``/``Infinity`` tokens, and lists nested thousands deep.

Checked on every response:

* no 5xx;
* the body is UTF-8, valid JSON without NaN/Infinity tokens, and every string in it
  is valid Unicode (no lone surrogate), 2xx and 4xx alike;
* a 4xx is ``{"detail": [{"loc": [...], "msg": str, ...}, ...]}`` whose ``loc`` starts
  with "body", "query" or "path";
* a 400 only for a body that does not parse as JSON (Python's ``json.loads``);
* a 4xx about the body of a JSON object names a field: ``loc[1]`` is a field of the
  request schema or a key that was sent.

Hypothesis raises ``sys.getrecursionlimit()`` while a test runs, so the server's
``json.loads`` then parses lists nested 1000+ deep that it refuses under the default
limit (Python 3.12's parser takes 5000 levels even then);
``test_deep_lists_in_each_field_are_a_4xx_under_a_raised_recursion_limit`` checks
that case for every field, deterministically.

``ATTNVIZ_ANY_JSON_EXAMPLES`` (default 40) sets the examples per test and endpoint.
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from attnviz.pretrained import MODELS
from attnviz.server.main import create_app
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

EXAMPLES = int(os.environ.get("ATTNVIZ_ANY_JSON_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
LOCATIONS = {"body", "query", "path"}


# The endpoints, from the OpenAPI document ----------------------------------------------


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    fields: dict[str, Any] = field(default_factory=dict)  # body field -> its schema
    required: tuple[str, ...] = ()
    closed: bool = False  # additionalProperties: false
    example: dict[str, Any] | None = None
    params: dict[str, tuple[str, Any]] = field(default_factory=dict)  # name -> (in, schema)

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


OPENAPI = create_app().openapi()
SCHEMAS = OPENAPI["components"]["schemas"]


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = SCHEMAS[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def operations() -> list[Operation]:
    found = []
    for path, item in OPENAPI["paths"].items():
        for method, spec in item.items():
            params = {p["name"]: (p["in"], p.get("schema", {})) for p in spec.get("parameters", [])}
            content = spec.get("requestBody", {}).get("content", {})
            if "application/json" not in content:
                found.append(Operation(method.upper(), path, params=params))
                continue
            body = resolve(content["application/json"]["schema"])
            examples = body.get("examples") or [None]
            found.append(
                Operation(
                    method.upper(),
                    path,
                    fields=dict(body.get("properties", {})),
                    required=tuple(body.get("required", ())),
                    closed=body.get("additionalProperties") is False,
                    example=examples[0] if isinstance(examples[0], dict) else None,
                    params=params,
                )
            )
    return found


# The head atlas is left out: a valid corpus is a minute of forward passes through a
# packaged model by design (any JSON at it is fuzzed on tiny models in
# tests/server/test_heads_api.py).
OPERATIONS = [op for op in operations() if not op.path.startswith("/api/v1/models/heads")]
WITH_BODY = [op for op in OPERATIONS if op.fields]
WITH_QUERY_OR_GET = [op for op in OPERATIONS if op.params or op.method == "GET"]


def test_the_api_has_the_endpoints_this_file_is_meant_to_reach() -> None:
    names = {str(op) for op in OPERATIONS}
    assert {
        "POST /api/v1/attention",
        "POST /api/v1/lessons/scaling",
        "POST /api/v1/lessons/decoding",
        "POST /api/v1/lessons/transformer",
        "POST /api/v1/models/attention",
        "GET /api/v1/lessons/parameters",
        "GET /api/v1/models",
        "GET /api/v1/presets",
        "GET /healthz",
    } <= names
    assert {op.path for op in WITH_BODY} >= {"/api/v1/attention", "/api/v1/models/attention"}
    assert all(op.example is not None or not op.required for op in WITH_BODY)


# Raw JSON text ------------------------------------------------------------------------


@dataclass(frozen=True)
class Deep:
    """Arrays (or objects) nested ``depth`` deep, written as raw text."""

    depth: int
    kind: str = "list"

    def text(self) -> str:
        if self.kind == "list":
            return "[" * self.depth + "1" + "]" * self.depth
        if self.kind == "empty":
            return "[" * self.depth + "]" * self.depth
        return '{"a":' * self.depth + "1" + "}" * self.depth


def dump(value: Any) -> str:
    """JSON text of ``value``: NaN/Infinity as those tokens, every non-ASCII character
    (lone surrogates included) as a ``\\uXXXX`` escape, :class:`Deep` as its text."""
    if isinstance(value, Deep):
        return value.text()
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)  # "-0.0", "1e+308", "5e-324": all valid JSON numbers
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=True)
    if isinstance(value, list):
        return "[" + ",".join(dump(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{dump(str(k))}:{dump(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def test_dump_writes_what_python_cannot_encode() -> None:
    text = dump({"s": "a\ud800", "n": [math.nan, math.inf, -math.inf, -0.0, 5e-324]})
    assert text == '{"s":"a\\ud800","n":[NaN,Infinity,-Infinity,-0.0,5e-324]}'
    assert text.isascii()
    assert json.loads(text)["s"] == "a\ud800"
    assert dump([Deep(3)]) == "[[[[1]]]]"


# Hostile values -----------------------------------------------------------------------

SPECIAL_NUMBERS = [
    0,
    -1,
    1,
    -0.0,
    0.5,
    1e308,
    -1e308,
    5e-324,
    -5e-324,
    10**30,
    -(10**30),
    -(2**63) - 1,
    -(2**63),
    2**63 - 1,
    2**63,
    2**64,
    3.4028235e38,
    3.5e38,
    -3.5e38,
    1e9,
    1.0,
    math.nan,
    math.inf,
    -math.inf,
]
SPECIAL_STRINGS = [
    "",
    " ",
    "\t\n",
    "\x00",
    "<pad>",
    "[CLS]",
    "[PAD]",
    "-inf",
    "inf",
    "NaN",
    "1",
    "1e308",
    "true",
    "null",
    "\ud800",
    "\udfff",
    "a \ud83d b",
    "\ud83d\ude00",  # a pair, escaped separately: the server reads one valid character
    "\ufeff",
    "\u2028",
    "机 器 学 习",
    "x" * 201,  # longer than the server echoes
    "a " * 150,
    "a " * 600,  # more tokens than BERT has positions
]

surrogates = st.integers(0xD800, 0xDFFF).map(chr)
strings = st.one_of(
    st.sampled_from(SPECIAL_STRINGS),
    st.lists(st.one_of(st.characters(), surrogates, st.sampled_from(" \t\n\x00")), max_size=24).map(
        "".join
    ),
)
numbers = st.one_of(
    st.sampled_from(SPECIAL_NUMBERS),
    st.integers(),
    st.integers(min_value=-2, max_value=130),  # ids near vocab_size, layers, indices
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),  # NaN and ±Infinity included
)
deep = st.builds(
    Deep, st.sampled_from([500, 999, 1000, 1001, 5000]), st.sampled_from(["list", "empty", "dict"])
)
scalars = st.one_of(numbers, strings, st.booleans(), st.none())
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(strings, children, max_size=5),
    ),
    max_leaves=24,
)
hostile = st.one_of(scalars, json_values, deep)
unknown_keys = strings.filter(lambda key: key not in {f for op in WITH_BODY for f in op.fields})


def _constraints(schema: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The schema and every schema inside it (anyOf, items), with its depth in arrays."""
    stack = [(0, resolve(schema))]
    while stack:
        depth, node = stack.pop()
        yield depth, node
        stack.extend((depth, resolve(s)) for s in node.get("anyOf", []) + node.get("oneOf", []))
        if isinstance(node.get("items"), dict):
            stack.append((depth + 1, resolve(node["items"])))


def edge_values(schema: dict[str, Any]) -> list[Any]:
    """Values at and just past the edges the field's schema states."""
    values: list[Any] = []
    for _, node in _constraints(schema):
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if key in node:
                edge = node[key]
                values += [edge, edge - 1, edge + 1, float(edge), [edge], [edge + 1]]
        for value in node.get("enum", []):
            values += [value, [value], str(value).upper(), f" {value}", {"value": value}]
        if node.get("maxLength", 10**9) <= 300:
            values.append("x" * (node["maxLength"] + 1))
        if node.get("maxItems", 10**9) <= 80:
            values.append([1] * (node["maxItems"] + 1))
        if "minItems" in node:
            values += [[], [[]], [""]]
    return values


def valid_edges(schema: dict[str, Any]) -> list[Any]:
    """Values the schema allows, at its edges: minimum, maximum, each enum value."""
    values: list[Any] = []
    for depth, node in _constraints(schema):
        found = [node[k] for k in ("minimum", "maximum") if k in node] + node.get("enum", [])
        if depth == 0:
            values += found
        elif depth == 1:
            values += [[v] for v in found]
    return values


def field_value(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    edges = edge_values(schema)
    return st.one_of(st.sampled_from(edges), hostile) if edges else hostile


# Sending and checking -----------------------------------------------------------------


@pytest.fixture(scope="module")
def api() -> Iterator[TestClient]:
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        assert MODELS.wait(300), "the pretrained models did not load within 300 s"
        yield client


UNPARSEABLE = object()


def parsed(raw: bytes) -> Any:
    """The body as the server's ``json.loads`` reads it, or UNPARSEABLE."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return UNPARSEABLE


def printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _no_constant(token: str) -> Any:
    raise AssertionError(f"{token} in a response body: not JSON")


def _lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
    return False


def query_text(value: Any) -> str:
    return value if isinstance(value, str) else dump(value)


def encode_query(params: dict[str, str]) -> str:
    """``k=v&...``, each percent-encoded from its UTF-8 (lone surrogates as their bytes)."""

    def quote(text: str) -> str:
        return urllib.parse.quote(text.encode("utf-8", "surrogatepass"), safe="")

    return "&".join(f"{quote(k)}={quote(v)}" for k, v in params.items())


def read_file(content: bytes, context: str) -> Any:
    """A file of exact maps (POST .../attention/download), read by numpy or safetensors."""
    if content.startswith(b"\x93NUMPY"):
        return np.load(io.BytesIO(content))
    from safetensors.numpy import load

    try:
        return load(content)
    except Exception as error:
        raise AssertionError(f"neither .npy nor safetensors: {error}\n{context}") from error


def send(
    api: TestClient, op: Operation, raw: bytes, query: dict[str, str] | None = None
) -> tuple[Any, dict[str, Any]]:
    """Send ``raw`` (and ``query``) to ``op`` and check the response; returns it parsed."""
    url = op.path
    for name, (where, _) in op.params.items():
        if where == "path":
            url = url.replace("{" + name + "}", "x")
    if query:
        url += "?" + encode_query(query)
    response = api.request(
        op.method, url, content=raw, headers={"content-type": "application/json"}
    )
    context = f"{op} {url!r}\nraw body: {raw[:3000]!r}\nanswer {response.status_code}: "
    context += repr(response.content[:3000])
    if currently_in_test_context():
        event(f"status {response.status_code}")  # --hypothesis-show-statistics
    assert response.status_code < 500, context
    if response.headers["content-type"] == "application/octet-stream":  # a file of maps
        assert response.status_code == 200, context
        return response.status_code, read_file(response.content, context)
    lines = response.headers["content-type"].startswith("application/x-ndjson")
    assert lines or response.headers["content-type"].startswith("application/json"), context
    assert not (lines and response.status_code >= 400), f"an error as NDJSON\n{context}"
    try:
        text = response.content.decode("utf-8")
    except UnicodeDecodeError as error:
        raise AssertionError(f"not UTF-8: {error}\n{context}") from error
    try:  # a streamed answer (NDJSON) is one JSON value per line
        data = (
            [json.loads(line, parse_constant=_no_constant) for line in text.splitlines()]
            if lines
            else json.loads(text, parse_constant=_no_constant)
        )
    except ValueError as error:
        raise AssertionError(f"not JSON: {error}\n{context}") from error
    assert not _lone_surrogate(data), f"a lone surrogate in the response\n{context}"
    if response.status_code >= 400:
        check_error(op, raw, query or {}, response.status_code, data, context)
    return response.status_code, data


def check_error(
    op: Operation, raw: bytes, query: dict[str, str], status: int, data: Any, context: str
) -> None:
    assert isinstance(data, dict), context
    detail = data.get("detail")
    assert isinstance(detail, list) and detail, context
    for entry in detail:
        assert isinstance(entry, dict), context
        loc, msg = entry.get("loc"), entry.get("msg")
        assert isinstance(loc, list) and loc, context
        assert loc[0] in LOCATIONS, context
        assert all(isinstance(p, str | int) and not isinstance(p, bool) for p in loc), context
        assert isinstance(msg, str) and msg, context
    body = parsed(raw) if op.fields and op.method in ("POST", "PUT", "PATCH") else None
    if status == 400:
        assert body is UNPARSEABLE, f"400 for a body that parses as JSON\n{context}"
        return
    # The error names the field it is about.
    if isinstance(body, dict):
        names = set(op.fields) | {printable(k) for k in body}
        for entry in detail:
            loc = entry["loc"]
            if loc[0] == "body":
                assert len(loc) >= 2 and loc[1] in names, f"loc names no field\n{context}"
    known = {name for name, (where, _) in op.params.items() if where == "query"}
    for entry in detail:
        loc = entry["loc"]
        if loc[0] == "query":
            assert len(loc) >= 2, context
            assert loc[1] in known | {printable(k) for k in query}, context


# The tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("op", WITH_BODY, ids=str)
def test_the_example_of_each_endpoint_is_accepted(api: TestClient, op: Operation) -> None:
    """The near-valid bodies below start from these: they must be valid."""
    if op.path.startswith("/api/v1/models") and not api.get("/api/v1/models").json()["models"]:
        pytest.skip("no pretrained model installed")
    example = dict(op.example or {})
    if op.path.endswith("/tiles"):  # a tile is of a pass kept by an earlier answer: make one
        grid = api.post("/api/v1/models/attention", json={
            "texts": ["The cat sat on the mat."], "sequence_index": 0, "display_size": 8,
        })  # fmt: skip
        example.update(pass_key=grid.json()["pass_key"], layer_index=0, head_index=0)
    status, _ = send(api, op, dump(example).encode())
    assert 200 <= status < 300


@pytest.mark.parametrize("op", OPERATIONS, ids=str)
@FUZZ
@given(value=st.one_of(hostile, st.dictionaries(strings, hostile, max_size=4)))
def test_any_json_value_as_the_body(api: TestClient, op: Operation, value: Any) -> None:
    send(api, op, dump(value).encode())


@pytest.mark.parametrize("op", WITH_BODY, ids=str)
@FUZZ
@given(data=st.data())
def test_objects_of_the_real_fields_with_hostile_values(
    api: TestClient, op: Operation, data: st.DataObject
) -> None:
    body = data.draw(
        st.fixed_dictionaries(
            {}, optional={name: field_value(schema) for name, schema in op.fields.items()}
        )
    )
    body |= data.draw(st.dictionaries(unknown_keys, hostile, max_size=2), label="unknown keys")
    send(api, op, dump(body).encode())


def _paths(value: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every place inside ``value`` (not the root itself), at most 40 per list."""
    items: list[tuple[str | int, Any]] = []
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))[:40]
    for key, child in items:
        yield (*prefix, key)
        yield from _paths(child, (*prefix, key))


def _replaced(value: Any, path: tuple[str | int, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)  # type: ignore[index]
    return copy


@pytest.mark.parametrize("op", WITH_BODY, ids=str)
@FUZZ
@given(data=st.data())
def test_a_valid_body_with_one_thing_wrong(
    api: TestClient, op: Operation, data: st.DataObject
) -> None:
    base = op.example or {}
    kind = data.draw(st.sampled_from(["replace", "set field", "unknown key", "drop"]))
    if kind == "replace" and base:
        path = data.draw(st.sampled_from(list(_paths(base))), label="path")
        body = _replaced(base, path, data.draw(hostile, label="value"))
    elif kind in ("set field", "replace"):
        name = data.draw(st.sampled_from(sorted(op.fields)), label="field")
        body = {**base, name: data.draw(field_value(op.fields[name]), label="value")}
    elif kind == "unknown key":
        key = data.draw(unknown_keys, label="key")
        body = {**base, key: data.draw(hostile, label="value")}
    else:
        name = data.draw(st.sampled_from(sorted(op.fields)), label="field")
        body = {k: v for k, v in base.items() if k != name}
    raw = dump(body).encode()
    status, answer = send(api, op, raw)
    body_read = parsed(raw)
    if kind == "unknown key" and op.closed and body_read is not UNPARSEABLE:
        # additionalProperties: false -- the 422 names the key that is not a field.
        extra = {printable(k) for k in body_read} - set(op.fields)
        assert status == 422, (raw, answer)
        assert extra & {e["loc"][1] for e in answer["detail"] if len(e["loc"]) > 1}, (raw, answer)


@pytest.mark.parametrize("op", WITH_BODY, ids=str)
@FUZZ
@given(data=st.data())
def test_a_valid_body_with_several_fields_at_their_edges(
    api: TestClient, op: Operation, data: st.DataObject
) -> None:
    """Allowed edges of several fields at once (widest model, float16, base64...)."""
    edged = {name: valid_edges(schema) for name, schema in op.fields.items()}
    names = data.draw(
        st.lists(
            st.sampled_from(sorted(n for n in edged if edged[n])),
            min_size=2,
            max_size=5,
            unique=True,
        )
    )
    body = {**(op.example or {})}
    for name in names:
        body[name] = data.draw(st.sampled_from(edged[name]), label=name)
    send(api, op, dump(body).encode())


@pytest.fixture
def raised_recursion_limit() -> Iterator[int]:
    """sys.setrecursionlimit(4000) for one test, as Hypothesis (and other tools) raise it."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 4000))
    yield sys.getrecursionlimit()
    sys.setrecursionlimit(old)


@pytest.mark.parametrize(
    ("op", "name"),
    [(op, name) for op in WITH_BODY for name in op.fields],
    ids=lambda value: str(value),
)
def test_deep_lists_in_each_field_are_a_4xx_under_a_raised_recursion_limit(
    api: TestClient, op: Operation, name: str, raised_recursion_limit: int
) -> None:
    """The same property, made deterministic for the depths the fuzzing above hit.

    With the default limit (1000) the server's ``json.loads`` gives up on a body nested
    about 1000 deep before any of the app's code sees it (a 400). Under a higher limit,
    as inside every Hypothesis test, it parses 1500 levels, and the app's validators
    must not be the next thing to run out of stack.
    """
    for depth in (1500, 2500):
        send(api, op, dump({**(op.example or {}), name: Deep(depth)}).encode())


def query_value(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    """A query parameter's text: an edge of its schema or any scalar (URLs are short)."""
    edges = edge_values(schema)
    values = st.one_of(st.sampled_from(edges), scalars) if edges else scalars
    return values.map(query_text)


@pytest.mark.parametrize("op", WITH_QUERY_OR_GET, ids=str)
@FUZZ
@given(data=st.data())
def test_hostile_query_parameters(api: TestClient, op: Operation, data: st.DataObject) -> None:
    declared = [name for name, (where, _) in op.params.items() if where == "query"]
    values = {
        name: data.draw(query_value(op.params[name][1]), label=name)
        for name in data.draw(
            st.lists(st.sampled_from(declared), unique=True) if declared else st.just([])
        )
    }
    extra = data.draw(st.dictionaries(strings, scalars.map(query_text), max_size=2), label="extra")
    body = data.draw(st.one_of(st.just(b""), hostile.map(lambda v: dump(v).encode())), label="body")
    send(api, op, body, {**extra, **values})
