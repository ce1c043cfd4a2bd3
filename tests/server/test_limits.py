"""Limits, hostile input, headers and logs: every bad input gets a 4xx, never a 5xx."""

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from attnviz.server.limits import MAX_TOKENS
from attnviz.server.main import create_app
from attnviz.server.middleware import CONTENT_SECURITY_POLICY
from attnviz.server.settings import Settings, get_settings
from fastapi.testclient import TestClient

URL = "/api/v1/attention"


@pytest.mark.parametrize(
    ("overrides", "body", "loc", "value", "limit"),
    [
        ({"max_batch_size": 2}, {"sequences": [[1], [2], [3]]}, ["body", "sequences"], 3, 2),
        (
            {"max_batch_size": 1},
            {"sequences": [[1]], "targets": [[1], [2]]},
            ["body", "targets"],
            2,
            1,
        ),
        ({"max_seq_len": 4}, {"sequences": [[1], "a b c d e"]}, ["body", "sequences", 1], 5, 4),
        ({"max_d_model": 16}, {"sequences": [[1]], "d_model": 32}, ["body", "d_model"], 32, 16),
        ({"max_num_heads": 2}, {"sequences": [[1]], "num_heads": 4}, ["body", "num_heads"], 4, 2),
    ],
)
def test_size_limits_from_settings_are_413_naming_field_value_and_limit(
    client: TestClient,
    overrides: dict[str, int],
    body: dict[str, Any],
    loc: list[Any],
    value: int,
    limit: int,
) -> None:
    client.app.dependency_overrides[get_settings] = lambda: Settings(**overrides)
    response = client.post(URL, json=body)
    assert response.status_code == 413, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == loc
    assert f"{value} is over the limit of {limit}" in detail["msg"]
    assert "ATTNVIZ_MAX_" in detail["msg"]


def test_layer_limit_applies_to_the_transformer_lesson(client: TestClient) -> None:
    client.app.dependency_overrides[get_settings] = lambda: Settings(max_layers=3)
    response = client.post(
        "/api/v1/lessons/transformer", json={"sequences": [[1]], "num_layers": 4}
    )
    assert response.status_code == 413
    assert response.json()["detail"][0]["loc"] == ["body", "num_layers"]


HOSTILE: list[tuple[str, Any]] = [
    ("malformed JSON", b'{"sequences": [[1, 2]'),
    ("not JSON at all", b"\x00\xff\xfe garbage"),
    ("a list, not an object", b"[1, 2, 3]"),
    ("NaN d_model", b'{"sequences": [[1]], "d_model": NaN}'),
    ("Infinity seed", b'{"sequences": [[1]], "seed": Infinity}'),
    ("-Infinity mask_fill", b'{"sequences": [[1]], "mask_fill": -Infinity}'),
    ("string ids", {"sequences": [["1", "2"]]}),
    ("float ids", {"sequences": [[1.5, 2]]}),
    ("bool ids", {"sequences": [[True, False]]}),
    ("null sequences", {"sequences": None}),
    ("nested too deep", {"sequences": [[[1]]]}),
    ("huge id", {"sequences": [[10**30]]}),
    ("negative id", {"sequences": [[-5]]}),
    ("huge seed", {"sequences": [[1]], "seed": 2**64}),
    ("negative d_model", {"sequences": [[1]], "d_model": -8}),
    ("huge d_model", {"sequences": [[1]], "d_model": 10**9}),
    ("zero heads", {"sequences": [[1]], "num_heads": 0}),
    ("empty string", {"sequences": [""]}),
    ("whitespace only", {"sequences": ["  \t\n "]}),
    ("empty list", {"sequences": [[]]}),
    ("10 000 one-character tokens", {"sequences": [" ".join("x" * 10_000)]}),
    ("10 000 ids", {"sequences": [[1] * 10_000]}),
    ("65 sequences", {"sequences": [[1]] * 65}),
    ("unknown field", {"sequences": [[1]], "evil": "__import__('os')"}),
    ("pad_id beyond vocab", {"sequences": [[1]], "pad_id": 100}),
    ("unknown device", {"sequences": [[1]], "device": "tpu:0"}),
    ("dropout 1", {"sequences": [[1]], "dropout": 1.0}),
    ("display_size 0", {"sequences": [[1]], "display_size": 0}),
    ("sequence_index out of range", {"sequences": [[1]], "sequence_index": 3}),
]


@pytest.mark.parametrize(("name", "body"), HOSTILE, ids=[name for name, _ in HOSTILE])
def test_hostile_input_is_a_4xx_with_a_message(client: TestClient, name: str, body: Any) -> None:
    if isinstance(body, bytes):
        response = client.post(URL, content=body, headers={"content-type": "application/json"})
    else:
        response = client.post(URL, json=body)
    assert 400 <= response.status_code < 500, (name, response.status_code, response.text[:200])
    detail = response.json()["detail"]
    # FastAPI's validation errors (a list naming the field) or, for a body that is
    # not JSON text at all, its own message.
    assert detail == "There was an error parsing the body" or all(d["msg"] for d in detail)
    json.loads(response.content, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))


@pytest.mark.parametrize(
    "words",
    ["日本語 テキスト", "emoji 🙂 👍", "tab\tsep", "ctrl \x00 \x07 \x1b[31m", "<pad> x", "ＡＢＣ ́"],
)
def test_unicode_and_control_characters_are_just_words(client: TestClient, words: str) -> None:
    response = client.post(URL, json={"sequences": [words]})
    assert response.status_code == 200, response.text
    labels = response.json()["key_labels"][0]
    assert [label for label in labels if label != "<pad>"] == [
        w for w in words.split() if w != "<pad>"
    ]


@pytest.fixture
def small_body_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("ATTNVIZ_MAX_BODY_BYTES", "2048")
    monkeypatch.setenv("ATTNVIZ_PACKAGED_MODELS", "false")  # the toy API's limits only
    get_settings.cache_clear()
    try:
        with TestClient(create_app()) as client:
            yield client
    finally:
        get_settings.cache_clear()


def test_oversized_bodies_are_refused_before_parsing(small_body_app: TestClient) -> None:
    big = {"sequences": [[1] * 2000]}
    response = small_body_app.post(URL, json=big)
    assert response.status_code == 413
    assert "2048 bytes" in response.json()["detail"][0]["msg"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"sequences": [['
        for _ in range(1000):
            yield b"1, "
        yield b"1]]}"

    response = small_body_app.post(
        URL, content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert small_body_app.post(URL, json={"sequences": [[1, 2]]}).status_code == 200


def test_security_headers(client: TestClient) -> None:
    page = client.get("/")
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY.split("script-src")[1].split(";")[0]
    for response in (page, client.get("/healthz"), client.post(URL, json={"sequences": [[1]]})):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"


def test_cors_is_off_by_default_and_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNVIZ_PACKAGED_MODELS", "false")  # the toy API's headers only
    get_settings.cache_clear()
    preflight = {"origin": "https://example.org", "access-control-request-method": "POST"}
    try:
        with TestClient(create_app()) as client:
            headers = client.options(URL, headers=preflight).headers
            assert "access-control-allow-origin" not in headers
        monkeypatch.setenv("ATTNVIZ_CORS_ORIGINS", '["https://example.org"]')
        get_settings.cache_clear()
        with TestClient(create_app()) as client:
            response = client.options(URL, headers=preflight)
            assert response.headers["access-control-allow-origin"] == "https://example.org"
    finally:
        get_settings.cache_clear()


def test_one_json_access_log_line_per_request(client: TestClient) -> None:
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Collect()
    logger = logging.getLogger("attnviz.access")
    logger.addHandler(handler)
    try:
        client.post(URL + "?token=secret", json={"sequences": [[1, 2]]})
        client.get("/nope")
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in records]
    assert [(r["method"], r["path"], r["status"]) for r in lines] == [
        ("POST", URL, 200),
        ("GET", "/nope", 404),
    ]
    assert lines[0]["request_bytes"] > 0 and lines[0]["response_bytes"] > 0
    assert lines[0]["duration_ms"] >= 0
    assert "secret" not in records[0]  # no query strings or bodies in the log


def test_device_out_of_memory_is_503_and_the_server_keeps_serving(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnviz.server.payloads import attention as attention_payload

    def out_of_memory(*args: Any, **kwargs: Any) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(attention_payload, "compute_attention", out_of_memory)
    response = client.post(URL, json={"sequences": [[1, 2, 3]], "seed": 99})
    assert response.status_code == 503
    assert response.json()["detail"][0]["loc"] == ["body", "device"]
    assert "ran out of memory" in response.json()["detail"][0]["msg"]
    monkeypatch.undo()
    assert client.post(URL, json={"sequences": [[1, 2, 3]], "seed": 99}).status_code == 200


MAX = MAX_TOKENS  # the schema's bound on one sequence (ATTNVIZ_MAX_SEQ_LEN's default)


def _words(count: int) -> str:
    return " ".join(f"w{i}" for i in range(count))


@pytest.mark.parametrize(
    ("path", "body", "loc", "count", "limit"),
    [
        (URL, {"sequences": [_words(MAX + 1)]}, ["body", "sequences", 0], MAX + 1, MAX),
        (URL, {"sequences": [list(range(MAX + 1))]}, ["body", "sequences", 0], MAX + 1, MAX),
        (
            URL,
            {"sequences": ["a b"], "targets": [_words(MAX + 1)]},
            ["body", "targets", 0],
            MAX + 1,
            MAX,
        ),
        ("/api/v1/lessons/decoding", {"sequence": _words(129)}, ["body", "sequence"], 129, 128),
        ("/api/v1/lessons/decoding", {"sequence": [1] * 129}, ["body", "sequence"], 129, 128),
        (
            "/api/v1/lessons/transformer",
            {"sequences": [_words(MAX + 1)]},
            ["body", "sequences", 0],
            MAX + 1,
            MAX,
        ),
    ],
)
def test_a_sequence_over_the_schema_bound_is_422_naming_it_whether_ids_or_words(
    client: TestClient, path: str, body: dict[str, Any], loc: list[Any], count: int, limit: int
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert [d["loc"] for d in detail] == [loc]
    assert f"{count} tokens; the limit is {limit}" in detail[0]["msg"]


def test_a_sequence_at_the_schema_bound_is_accepted(client: TestClient) -> None:
    response = client.post(
        "/api/v1/lessons/decoding", json={"sequence": _words(128), "vocab_size": 200}
    )
    assert response.status_code == 200, response.text
    assert len(response.json()["labels"]) == 128
