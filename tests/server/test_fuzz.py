"""Fuzz the API from its own OpenAPI schema (schemathesis), with every check.

schemathesis.toml (read from the repository root) sets valid and invalid data, 200
examples per operation, and the documented refusals of schema-valid requests (413 for
the configured limits, 422 for conditions the schema cannot express). On top of the
built-in checks, :func:`refusals_are_documented_conditions` checks that such a refusal
is one of those conditions and not a contradiction of the schema. ATTNVIZ_FUZZ_EXAMPLES
changes the count; scripts/fuzz.sh runs a longer campaign against a real server.
"""

import json
import os
from collections.abc import Iterator

import pytest
import schemathesis
from attnviz.pretrained import MODELS
from attnviz.server.main import create_app
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode

pytestmark = pytest.mark.slow  # fuzzes the whole API from its schema


DOCUMENTATION_KEYWORDS = frozenset({"description", "title", "examples", "example"})
"""JSON Schema keywords that constrain nothing: what a request may hold is the same without
them. Left out of the schema fuzzed, they would only slow schemathesis' generation of
invalid bodies, which rewrites and canonicalises the whole schema for each (about 17% of
the pretrained routes' time)."""


def constraints_only(node: object, parent: str | None = None) -> object:
    """``node`` (an OpenAPI document or part of it) without DOCUMENTATION_KEYWORDS; a
    property of that name (a key of ``properties``) is kept."""
    if isinstance(node, dict):
        return {
            key: constraints_only(value, key)
            for key, value in node.items()
            if parent == "properties" or key not in DOCUMENTATION_KEYWORDS
        }
    if isinstance(node, list):
        return [constraints_only(value) for value in node]
    return node


@pytest.fixture(scope="module")
def api_schema() -> schemathesis.BaseSchema:
    """The app's own schema, documentation left out, calling the app in-process.

    Straight from the app: from_asgi would fetch it through a client that runs the
    lifespan, whose model loader would then import transformers in a thread of its own
    while other tests import it too.
    """
    app = create_app()
    loaded = schemathesis.openapi.from_dict(constraints_only(app.openapi()))
    loaded.app = app
    return loaded


# Loaded when the test runs, not when pytest collects this file: schemathesis builds each
# operation's coverage cases (its boundary values, about 2,000 here) as it makes the test,
# 7 CPU-s that every worker of a parallel run paid at collection for a test only one runs.
# The head atlas is left out: each valid corpus is a minute of forward passes through a
# packaged model by design (its refusals are fuzzed on tiny models in
# tests/server/test_heads_api.py).
schema = schemathesis.pytest.from_fixture("api_schema").exclude(path_regex="^/api/v1/models/heads")
EXAMPLES = int(os.environ.get("ATTNVIZ_FUZZ_EXAMPLES", "200"))  # per operation

CONDITION_TYPES = {"value_error", "unicode_error"}
"""The error types of the checks the schema cannot express (app validators and the
engine); pydantic's own types (int_type, less_than_equal, ...) would mean the schema
promised something the server refuses."""


@schemathesis.check
def refusals_are_documented_conditions(ctx, response, case) -> None:  # type: ignore[no-untyped-def]
    """A schema-valid request refused with 413 names a limit; with 422, a condition."""
    if case.meta is None or case.meta.generation.mode != GenerationMode.POSITIVE:
        return
    if response.status_code not in (413, 422):
        return
    detail = json.loads(response.content)["detail"]
    for entry in detail:
        if response.status_code == 413:
            assert "ATTNVIZ_" in entry["msg"] or "limit" in entry["msg"], entry
        else:
            assert entry["type"] in CONDITION_TYPES, f"the schema allowed this: {entry}"


@schemathesis.check
def server_errors_are_loading_only(ctx, response, case) -> None:  # type: ignore[no-untyped-def]
    """No 5xx but the documented 503 of a pretrained model still loading (Retry-After).

    Replaces schemathesis' not_a_server_error: a model named in a request may be loading
    in the background, which is a 503 by design, not a failure.
    """
    if response.status_code < 500:
        return
    detail = json.loads(response.content)["detail"]
    assert response.status_code == 503 and "retry-after" in response.headers, response.status_code
    assert all(entry["type"] == "loading" for entry in detail), detail


@pytest.fixture(scope="module", autouse=True)
def ready_models() -> Iterator[None]:
    """The ASGI app runs without its lifespan here: the pretrained models are loaded up
    front, so that a request naming one meets it ready (one still loading is a 503 by design).
    """
    MODELS.configure([])
    MODELS.load()
    yield
    MODELS.clear()


def leaves(
    node: object, path: tuple[object, ...] = ()
) -> Iterator[tuple[tuple[object, ...], object]]:
    """Each scalar (or empty container) of a JSON document with its path of keys and indexes."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, (*path, key))
    elif isinstance(node, list) and node:
        for i, value in enumerate(node):
            yield from leaves(value, (*path, i))
    else:
        yield path, node


def is_documentation(path: tuple[object, ...]) -> bool:
    """Whether a path goes through a documentation keyword (not a property so named)."""
    return any(
        key in DOCUMENTATION_KEYWORDS and (i == 0 or path[i - 1] != "properties")
        for i, key in enumerate(path)
    )


def test_only_documentation_is_left_out_of_the_schema_fuzzed() -> None:
    document = create_app().openapi()
    # Scalars only: a field documented and nothing else becomes {} (any value), as it is.
    kept = {path: value for path, value in leaves(document) if value not in ({}, [])}
    bare = {
        path: value for path, value in leaves(constraints_only(document)) if value not in ({}, [])
    }
    assert bare == {path: value for path, value in kept.items() if not is_documentation(path)}
    assert len(bare) < len(kept)  # there was documentation to leave out
    # A property named like a keyword is a field, not documentation.
    assert constraints_only({"properties": {"title": {"type": "string", "title": "T"}}}) == {
        "properties": {"title": {"type": "string"}}
    }


@pytest.fixture
def node_id_for_schemathesis(request: pytest.FixtureRequest) -> None:
    """schemathesis' lazy schema (4.32) reads the test's id from ``node._nodeid``, pytest 8's
    attribute (pytest 9 keeps ``_id``): given it, each operation runs as a subtest labelled
    with its method and path."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


@schema.parametrize()
@pytest.mark.usefixtures("node_id_for_schemathesis")
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema_and_never_fails(case: schemathesis.Case) -> None:
    case.call_and_validate(
        additional_checks=[refusals_are_documented_conditions, server_errors_are_loading_only],
        excluded_checks=[not_a_server_error],
    )
