"""Property-based conformance: schemathesis against the live service's /openapi.json.

Every operation in the document is exercised in both generation modes: data
that conforms to the document (positive) and data that violates it (negative).
No response may be a 5xx, and every response must conform to the document: a
documented status code and content type, a body valid against the response
schema (the error envelope included) and the documented headers. Invalid data
must moreover be rejected with a 4xx (negative_data_rejection).

Every call carries one user's key. Path IDs are drawn both at random (the 404
and 400 branches) and from real resources of that user, created fresh for each
test (the 200 branches, whose bodies are then validated too).

Bounded and reproducible: derandomized Hypothesis, no example database, and a
fixed number of examples per operation and mode (MAX_EXAMPLES; set
KALENDS_FUZZ_EXAMPLES for a deeper local run).

Why not `schemathesis.pytest.from_fixture`: in schemathesis 4.32.5 it renames the
running item through `Node._nodeid`, which pytest 9.2 no longer has (it became
the structured `Node._id`), so every such test fails with `AttributeError:
'Function' object has no attribute '_nodeid'`. The document is therefore loaded
from the live URL with `schemathesis.openapi.from_url` in a fixture, and each
operation's `as_strategy()` drives a plain Hypothesis test: one pytest item per
(operation, mode), which can be selected with `-k` and marked individually.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import kalends.service.app  # noqa: F401  (registers and prepares every operation)
from registry import OPERATIONS
from rest_bridge import feeds

MAX_EXAMPLES = int(os.environ.get("KALENDS_FUZZ_EXAMPLES", "20"))
"""Per operation and per mode: keeps the whole run well under two minutes on two cores."""

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection,  # acts on negative cases only
]

SETTINGS = hypothesis.settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,  # the same inputs on every run
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=list(hypothesis.HealthCheck),
    phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate, hypothesis.Phase.shrink],
)

MODES = {"positive": GenerationMode.POSITIVE, "negative": GenerationMode.NEGATIVE}

KNOWN_BUGS: dict[tuple[str, str], str] = {
    # (operationId, mode): diagnosis. Each is a strict xfail: it must keep failing
    # until the product is fixed, and then this entry must go.
}


def _cases() -> Iterator[Any]:
    for name in OPERATIONS:
        for mode in MODES:
            reason = KNOWN_BUGS.get((name, mode))
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            yield pytest.param(name, mode, id=f"{name}-{mode}", marks=marks)


@pytest.fixture(scope="module")
def fuzz_user(live_server: Any) -> Any:
    """One user whose key authenticates every generated call."""
    return live_server.create_user(name="Schemathesis")


@pytest.fixture(scope="module")
def api_schema(live_server: Any) -> Any:
    schema = schemathesis.openapi.from_url(f"{live_server.url}/openapi.json")
    schema.config.update(base_url=live_server.url)
    # Every call carries the fuzzing user's key (see the test); the bearer scheme is
    # not generated, so negative examples are spent on parameters and bodies rather
    # than on an Authorization header the test replaces anyway.
    schema.config.generation.update(with_security_parameters=False)
    return schema


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


@pytest.fixture
def seeded(live_server: Any, fuzz_user: Any, http: requests.Session) -> Seeded:
    """Fresh resources of the fuzzing user, for this test alone (a generated DELETE may
    remove them). Random IDs only reach the 404 branch; these reach the 200 one."""
    return _seed(http, live_server.url, fuzz_user)


def test_every_operation_is_fuzzed(api_schema: Any) -> None:
    """The live document and the registry name the same operations, so none is skipped."""
    served = {op.ok().definition.raw["operationId"] for op in api_schema.get_all_operations()}
    assert served == set(OPERATIONS) | {feeds.OPERATION_ID}  # the one route beside it


def test_every_path_id_has_a_real_resource(api_schema: Any, seeded: Seeded) -> None:
    """Each kind of ID in a path is seeded, or the 200 branches of its operations would go
    unfuzzed. A failure here means `_seed` needs a step (or a body fix) for that resource."""
    missing = sorted({
        f"{op.label} `{param.name}`"
        for result in api_schema.get_all_operations()
        for op in [result.ok()]
        for param in op.path_parameters
        if not _path_parameters(op, seeded.ids).get(param.name)
    })
    assert not missing, (
        "no real resource for: " + "; ".join(missing)
        + "\nseeding attempts that failed: " + ("; ".join(seeded.failures) or "none")
    )


@pytest.mark.slow
@pytest.mark.parametrize(("operation_id", "mode"), list(_cases()))
def test_operation_conforms(
    api_schema: Any, fuzz_user: Any, live_server: Any, http: requests.Session,
    seeded: Seeded, operation_id: str, mode: str,
) -> None:
    operation = api_schema.find_operation_by_id(operation_id)
    if mode == "negative" and not _has_inputs(operation):
        pytest.skip("no parameter or body to make invalid")
    strategy = operation.as_strategy(generation_mode=MODES[mode])
    existing = _path_parameters(operation, seeded.ids)
    if existing and (mode == "positive" or _has_inputs(operation, beyond_path=True)):
        # Also address the caller's real resources (negative: with invalid query or body).
        strategy = strategy | operation.as_strategy(
            generation_mode=MODES[mode], path_parameters=existing
        )

    @SETTINGS
    @hypothesis.given(case=strategy)
    def run(case: Any) -> None:
        case.call_and_validate(
            base_url=live_server.url, session=http, headers=fuzz_user.headers, checks=CHECKS,
        )

    run()


# ---------------------------------------------------------------------------
# Inputs deeper runs found (KALENDS_FUZZ_EXAMPLES=400, and `schemathesis run` with its
# coverage and stateful phases), replayed on every run with the same checks.

def _replay(operation_id: str, body: dict[str, Any]) -> Any:
    return pytest.param(operation_id, body, id=f"{operation_id}-{next(iter(body))}")


@pytest.mark.parametrize(("operation_id", "body"), [
    _replay("createProfile", {"display_name": "a\u0000b"}),
    _replay("createProfile", {"description": "x\u0000"}),
    _replay("updateProfile", {"display_name": "a\u0000b"}),
    _replay("updateProfile", {"profile_image_url": "https://a.test/\u0000"}),
])
def test_found_conforming_input(
    api_schema: Any, fuzz_user: Any, live_server: Any, http: requests.Session,
    seeded: Seeded, operation_id: str, body: dict[str, Any],
) -> None:
    """U+0000 is valid JSON but not storable text: a conforming 400, never a 5xx."""
    operation = api_schema.find_operation_by_id(operation_id)
    if operation.method.upper() == "POST":
        body = {"platform_id": f"found-{secrets.token_hex(6)}", "display_name": "Found", **body}
    case = operation.Case(path_parameters=_path_parameters(operation, seeded.ids), body=body,
                          media_type="application/json")
    case.call_and_validate(
        base_url=live_server.url, session=http, headers=fuzz_user.headers, checks=CHECKS,
    )


@pytest.mark.parametrize("url", [
    pytest.param("https://a\u000fb.test/", id="control-character"),
    pytest.param('https://a.test/<script>"x', id="excluded-characters"),
])
def test_found_invalid_uri_is_rejected(
    api_schema: Any, fuzz_user: Any, live_server: Any, http: requests.Session,
    seeded: Seeded, url: str,
) -> None:
    """Not a `format: uri` value, so: 400 invalid_field (docs/http.md, "Errors")."""
    operation = api_schema.find_operation_by_id("updateProfile")
    case = operation.Case(path_parameters=_path_parameters(operation, seeded.ids),
                          body={"header_image_url": url}, media_type="application/json")
    response = case.call_and_validate(
        base_url=live_server.url, session=http, headers=fuzz_user.headers, checks=CHECKS,
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error.get("param")) == ("invalid_field", "header_image_url"), error


# ---------------------------------------------------------------------------
# Real resources for path parameters


def _has_inputs(operation: Any, *, beyond_path: bool = False) -> bool:
    params = [p for p in operation.iter_parameters() if not (beyond_path and p.location == "path")]
    return bool(params) or bool(operation.body)


def _path_parameters(operation: Any, real_ids: dict[str, str]) -> dict[str, str]:
    """Real IDs for every path parameter of the operation, or {} if one has none. Each
    parameter takes the real ID its documented pattern admits (a calendar event's
    `event_id` admits a cev_ ID, an event's an evt_ ID); where it admits several (an
    occurrence's `event_id`: an evt_ ID or a copy's cev_), the first seeded."""
    out: dict[str, str] = {}
    for param in operation.path_parameters:
        pattern = param.definition.get("schema", {}).get("pattern")
        fits = [v for v in real_ids.values() if pattern and re.search(pattern, v)]
        if not fits:
            return {}
        out[param.name] = fits[0]
    return out


@dataclass
class Seeded:
    ids: dict[str, str] = field(default_factory=dict)
    """Real IDs by prefix."""
    failures: list[str] = field(default_factory=list)


def _seed(http: requests.Session, base: str, user: Any) -> Seeded:
    """Create one resource of each kind the service offers, best effort: an operation
    not served yet, or a body the service rejects, just leaves that prefix out."""
    seeded = Seeded({"cal": user.calendar_id, "org": user.organization_id})
    ids = seeded.ids
    tag = secrets.token_hex(6)
    when = {"start_time": "2031-05-06T10:00:00", "start_timezone": "Europe/Paris",
            "end_time": "2031-05-06T11:00:00", "end_timezone": "Europe/Paris"}
    steps: list[tuple[str | None, tuple[str, ...], str, dict[str, Any]]] = [
        # (prefix created or None, prefixes needed, path, body)
        ("prf", (), "/v1/profiles", {"platform_id": f"fuzz-{tag}", "display_name": "Fuzz"}),
        ("evt", ("prf",), "/v1/profiles/{prf}/events", {"title": "Fuzz event", **when}),
        ("ser", ("prf",), "/v1/profiles/{prf}/series", {"name": "Fuzz", "slug": f"fuzz-{tag}"}),
        # Linked, so that removeSeriesEvent reaches its 204 branch too.
        (None, ("ser", "evt"), "/v1/series/{ser}/events", {"event_id": "{evt}"}),
        ("rsvp", ("evt",), "/v1/events/{evt}/rsvps", {"status": "going"}),
        ("cev", ("cal",), "/v1/calendars/{cal}/events", {"title": "Fuzz entry", **when}),
        ("sub", ("prf",), "/v1/subscriptions", {"subscription_type": "profile", "profile_id": "{prf}"}),
        ("fol", ("prf",), "/v1/follows", {"following_type": "profile", "target_id": "{prf}"}),
        # An .invalid host (RFC 6761) is never resolved: deliveries fail, nothing is sent.
        ("whe", ("prf",), "/v1/profiles/{prf}/webhook-endpoints",
         {"url": "https://fuzz.invalid/hook"}),
    ]
    for prefix, needs, path, body in steps:
        if not all(n in ids for n in needs):
            continue
        body = {k: v.format(**ids) if isinstance(v, str) else v for k, v in body.items()}
        url = path.format(**ids)
        response = http.post(base + url, json=body, headers=user.headers, timeout=30)
        if response.status_code in (200, 201, 204):
            if prefix is not None:
                ids[prefix] = response.json()["id"]
        elif _error_code(response) not in ("route_not_found", "method_not_allowed"):
            seeded.failures.append(f"POST {url} -> {response.status_code} {response.text[:300]}")
    if "evt" in ids:  # its one occurrence (docs/occurrences.md): 10:00 in Paris, in UTC
        ids["occurrence"] = f"{ids['evt']}:20310506T080000Z"
    return seeded


def _error_code(response: requests.Response) -> str | None:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None
