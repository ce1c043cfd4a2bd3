"""Fuzz the API from its own OpenAPI schema (schemathesis): no 5xx, and every
response conforms to the schema. A bounded run; scripts/fuzz.sh runs a longer one."""

import os

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.main import create_app

schema = schemathesis.openapi.from_asgi("/openapi.json", create_app())
EXAMPLES = int(os.environ.get("ATTNVIZ_FUZZ_EXAMPLES", "40"))  # per operation


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema_and_never_fails(case: schemathesis.Case) -> None:
    case.call_and_validate(
        checks=[
            schemathesis.checks.not_a_server_error,
            response_schema_conformance,
            content_type_conformance,
            status_code_conformance,
        ]
    )
