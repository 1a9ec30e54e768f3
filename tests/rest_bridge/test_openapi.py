"""The committed openapi.json is the document the code generates, and it is valid.

`openapi.json` at the repository root is what clients and reviewers read; the
service serves the same document, generated from the operation registry, at
`GET /openapi.json`. When a change to an operation, a model or the generator
alters the document, regenerate the file and commit it with the change:

    python -m tests.rest_bridge.test_openapi --write      # from the repository root

(`python tests/rest_bridge/test_openapi.py --write` does the same.)
"""

from __future__ import annotations

import difflib
import json
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rest_bridge import feeds

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "openapi.json"
REGENERATE = "python -m tests.rest_bridge.test_openapi --write"
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def generate() -> dict[str, Any]:
    """The document as the code generates it now."""
    import kalends.service.app  # noqa: F401  (registers every operation and prepares the registry)
    from rest_bridge import openapi

    return openapi.document()


def render(document: dict[str, Any]) -> str:
    """The committed form: two-space indents, sorted keys, UTF-8, a trailing newline."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write() -> Path:
    COMMITTED.write_text(render(generate()), encoding="utf-8")
    return COMMITTED


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield method, path, operation


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return generate()


def test_committed_document_is_current(document: dict[str, Any]) -> None:
    expected = render(document)
    if not COMMITTED.exists():
        pytest.fail(f"{COMMITTED.name} is missing. Generate it with `{REGENERATE}` and commit it.")
    actual = COMMITTED.read_text(encoding="utf-8")
    if actual != expected:
        diff = list(difflib.unified_diff(
            actual.splitlines(), expected.splitlines(),
            f"{COMMITTED.name} (committed)", f"{COMMITTED.name} (generated)", lineterm="", n=2,
        ))
        shown = "\n".join(diff[:60]) + ("\n..." if len(diff) > 60 else "")
        pytest.fail(
            f"{COMMITTED.name} differs from the document the code generates.\n"
            f"Regenerate it from the repository root with `{REGENERATE}`, review the diff "
            f"and commit it.\n\n{shown}",
            pytrace=False,
        )


def test_every_operation_appears_exactly_once(document: dict[str, Any]) -> None:
    from registry import OPERATIONS

    ids = [op.get("operationId") for _, _, op in _operations(document)]
    assert all(isinstance(i, str) and i for i in ids), "an operation has no operationId"
    counts = Counter(str(i) for i in ids)
    repeated = {name: n for name, n in counts.items() if n > 1}
    assert not repeated, f"operationIds used more than once: {repeated}"
    missing = sorted(set(OPERATIONS) - set(counts))
    assert not missing, f"registered operations missing from the document: {missing}"
    # The ICS feed is the one route outside the registry (rest_bridge/feeds.py).
    unknown = sorted(set(counts) - set(OPERATIONS) - {feeds.OPERATION_ID})
    assert not unknown, f"operations in the document but not in the registry: {unknown}"
    for name, op in OPERATIONS.items():
        documented = document["paths"][op.path][op.method.lower()]
        assert documented["operationId"] == name, (op.method, op.path, documented["operationId"])


@pytest.mark.slow
def test_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    """Validated against the OpenAPI 3.1 schema by schemathesis's loader (openapi-spec-validator
    is not a dependency), and every operation must load into a usable test definition."""
    import schemathesis
    from schemathesis.core.result import Ok

    assert document["openapi"].startswith("3.1.")
    schema = schemathesis.openapi.from_dict(document)
    schema.validate()  # raises on a document that breaks the OpenAPI 3.1 schema
    results = list(schema.get_all_operations())
    errors = [str(result.err()) for result in results if not isinstance(result, Ok)]
    assert not errors, errors
    assert len(results) == sum(1 for _ in _operations(document))


def test_openapi_spec_validator_finds_nothing(document: dict[str, Any]) -> None:
    """An independent validator (openapi-spec-validator, as users run it)."""
    from openapi_spec_validator import OpenAPIV31SpecValidator

    errors = [f"{list(e.path)}: {e.message}"
              for e in OpenAPIV31SpecValidator(document).iter_errors()]
    assert errors == []


@pytest.mark.slow
def test_a_generated_client_has_one_model_per_resource(document: dict[str, Any],
                                                       tmp_path: Path) -> None:
    """Resources are shared components: openapi-python-client makes one `Event` model
    (not GetEventResponse200, ListEventsResponse200DataItem, ...)."""
    import subprocess

    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(document), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "openapi_python_client", "generate", "--path", str(spec),
         "--output-path", str(tmp_path / "client"), "--meta", "none"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    models = {p.stem for p in (tmp_path / "client" / "models").glob("*.py")} - {"__init__"}
    assert "event" in models and "profile" in models and "event_page" in models
    assert [m for m in models if "response" in m] == []
    # One Event: what each event operation answers is that one component.
    for name in ("getEvent", "createEvent", "updateEvent", "cancelEvent"):
        [op] = [o for _, _, o in _operations(document) if o["operationId"] == name]
        assert op["responses"]["200" if name != "createEvent" else "201"]["content"][
            "application/json"]["schema"] == {"$ref": "#/components/schemas/Event"}, name


def test_one_profile_whatever_the_operation(document: dict[str, Any]) -> None:
    """createProfile answers the Profile the reads answer, plus `organization_id`
    (docs/api-choices.md, opening list): one component, that key optional and said to be
    createProfile's."""
    schemas = document["components"]["schemas"]
    assert [name for name in schemas if name[-1].isdigit()] == []
    profile = {"$ref": "#/components/schemas/Profile"}
    for name, status in (("createProfile", "201"), ("getProfile", "200"),
                         ("updateProfile", "200")):
        [op] = [o for _, _, o in _operations(document) if o["operationId"] == name]
        assert op["responses"][status]["content"]["application/json"]["schema"] == profile
    organization = schemas["Profile"]["properties"]["organization_id"]
    assert organization["type"] == "string" and "createProfile" in organization["description"]
    assert "organization_id" not in schemas["Profile"]["required"]
    assert "id" in schemas["Profile"]["required"]


def test_lists_that_refuse_repeats_say_so(document: dict[str, Any]) -> None:
    """`uniqueItems` wherever the server refuses a repeated entry, in OpenAPI and in
    the MCP tools' input schemas (the same models)."""
    from registry import OPERATIONS

    schemas = document["components"]["schemas"]
    unique = {
        ("SubscriptionCreate", "external_calendar_ids"),
        ("WebhookEndpointCreate", "event_types"), ("WebhookEndpointUpdate", "event_types"),
    }
    for model, field in unique:
        assert schemas[model]["properties"][field]["uniqueItems"] is True, (model, field)
    for name in ("createSubscription", "createWebhookEndpoint", "updateWebhookEndpoint"):
        properties = OPERATIONS[name].tool_input_schema()["properties"]
        field = "external_calendar_ids" if name == "createSubscription" else "event_types"
        assert properties[field]["uniqueItems"] is True, name


def _defaults(schema: Any, where: str) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(schema, dict):
        if "default" in schema:
            yield where, schema["default"], schema
        for key, value in schema.items():
            yield from _defaults(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for i, item in enumerate(schema):
            yield from _defaults(item, f"{where}[{i}]")


def test_every_advertised_default_is_accepted(document: dict[str, Any]) -> None:
    """A client or a model that sends the advertised default must not get a 400: a
    default is valid against its own schema (OpenAPI and MCP input schemas alike)."""
    jsonschema = pytest.importorskip("jsonschema")
    from registry import OPERATIONS

    components = document["components"]["schemas"]
    found = 0
    targets = [("openapi", document)] + [
        (f"tool {name}", op.tool_input_schema()) for name, op in OPERATIONS.items()]
    for label, root in targets:
        for where, default, schema in _defaults(root, label):
            found += 1
            check = {**schema, "$defs": {**components, **root.get("$defs", {})}}
            check = json.loads(json.dumps(check).replace("#/components/schemas/", "#/$defs/"))
            errors = list(jsonschema.Draft202012Validator(check).iter_errors(default))
            assert not errors, f"{where}: default {default!r} is refused: {errors[0].message}"
    assert found  # defaults there are (limit, detail, booleans): they are all accepted


def test_schemas_are_valid_json_schema_2020_12(document: dict[str, Any]) -> None:
    """OpenAPI 3.1's schema objects are JSON Schema 2020-12; each must be a valid one."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator
    schemas = [(f"components.schemas.{name}", schema)
               for name, schema in document["components"]["schemas"].items()]
    for method, path, op in _operations(document):
        where = f"{method.upper()} {path}"
        schemas += [(f"{where} parameter {p['name']}", p["schema"])
                    for p in op.get("parameters", [])]
        schemas += [(f"{where} response {status}", media["schema"])
                    for status, response in op["responses"].items()
                    for media in response.get("content", {}).values()]
    for where, schema in schemas:
        try:
            validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            pytest.fail(f"{where}: {exc.message}")


def test_served_document_is_the_generated_one(live_server: Any,
                                              document: dict[str, Any]) -> None:
    with urllib.request.urlopen(f"{live_server.url}/openapi.json", timeout=30) as response:
        assert response.status == 200
        assert response.headers.get_content_type() == "application/json"
        served = json.loads(response.read())
    assert served == document


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {REGENERATE}")
    print(f"wrote {write()}")
