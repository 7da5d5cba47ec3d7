"""schemathesis fuzzes the app from its own OpenAPI document: no 5xx, no answer off its schema.

Operations are driven through schemathesis' Python API with Hypothesis (its pytest plugin does
not load under this pytest). The checks are the ones the contract promises: no server error,
answers and their status codes, headers and content types as documented. "Positive data
acceptance" is left out on purpose: a spec's model and dataset params are validated against the
catalog and against each other, which a JSON schema can describe only loosely, so a schema-valid
body may rightly get a 422 naming the param."""

import json
import math

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from schemathesis.specs.openapi import checks as openapi_checks

from devstack import REDIS_URL, clear_namespace, new_token, sql_database
from trainjobs.service.api.app import create_app
from trainjobs.settings import Settings


@schemathesis.serializer("application/gzip")
def _as_bytes(_context, value) -> bytes:
    """A code upload's body: what Hypothesis drew, as bytes (mostly not a gzip'd tar: a 422)."""
    return value if isinstance(value, bytes) else str(value).encode()


@pytest.fixture(scope="module")
def fuzzed_app(tmp_path_factory):
    home = tmp_path_factory.mktemp("fuzz")
    with sql_database("sqlite", home) as url:
        settings = Settings(
            home=home, database_url=url, redis_url=REDIS_URL, namespace="tjtest-fuzz", run_background=False
        )
        app = create_app(settings)
        app.state.test_token = new_token(url, "fuzzer")
        with TestClient(app):
            yield app
        clear_namespace(REDIS_URL, "tjtest-fuzz")


def test_no_server_errors_and_every_answer_matches_the_schema(fuzzed_app):
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzzed_app)
    headers = {"Authorization": f"Bearer {fuzzed_app.state.test_token}"}
    checks = [
        schemathesis.checks.not_a_server_error,
        openapi_checks.response_schema_conformance,
        openapi_checks.status_code_conformance,
        openapi_checks.content_type_conformance,
        openapi_checks.response_headers_conformance,
    ]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 14

    for operation in operations:

        @given(case=operation.as_strategy())
        @hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case):
            case.call_and_validate(headers=headers, checks=checks)

        check()


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    else:
        yield path


def _replaced(spec: dict, path: tuple, new) -> dict:
    copy = json.loads(json.dumps(spec))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return copy


ODD_VALUES = st.one_of(
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308 * 10]),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=20),  # any code point, controls and bidi included
    st.sampled_from(["\u202e", "\x1b[2J", "\x00", "\ud7ff", "\U0010ffff"]),
)


def test_a_spec_with_any_leaf_made_non_finite_or_odd_unicode_never_gets_a_5xx(fuzzed_app):
    """Beside schemathesis (whose generated JSON never holds NaN or infinity): every field of a
    valid spec, in turn, set to a non-finite number or odd text, sent as Python's JSON writes it."""
    from devstack import tiny_wavenet_spec

    spec = tiny_wavenet_spec(name="fuzz", early_stopping={"patience": 2, "min_delta": 0.1}, grad_clip_norm=1.0)
    headers = {"Authorization": f"Bearer {fuzzed_app.state.test_token}", "Content-Type": "application/json"}
    client = TestClient(fuzzed_app)

    @given(path=st.sampled_from(list(_leaves(spec))), value=ODD_VALUES)
    @hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(path, value):
        body = json.dumps(_replaced(spec, path, value))  # allow_nan: NaN, Infinity, -Infinity tokens
        response = client.post("/v1/jobs", content=body.encode("utf-8", "surrogatepass"), headers=headers)
        assert response.status_code < 500, (path, value, response.text)
        assert isinstance(response.json(), dict)

    check()
