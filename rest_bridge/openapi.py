"""The OpenAPI 3.1 document, generated from the operation registry.

Request schemas come from the pydantic models; response schemas from each
operation's GraphQL selection set. Nothing here is written by hand per route;
the one route outside the registry, the ICS feed, declares its entry beside it.
"""

from __future__ import annotations

from typing import Any

from core.errors import ERROR_CODES, ERROR_TYPES
from registry import OPERATIONS, Operation, honest_defaults
from rest_bridge import feeds

_REF = "#/components/schemas/{model}"
_ERROR_REF = {"$ref": "#/components/responses/Error"}
# draft-ietf-httpapi-ratelimit-headers, on every authenticated response.
_RATE_LIMIT_HEADERS: dict[str, Any] = {
    "RateLimit-Policy": {"schema": {"type": "string"},
                         "description": 'The quota policy, e.g. `"default";q=6000;w=60`.'},
    "RateLimit": {"schema": {"type": "string"},
                  "description": 'What is left of it, e.g. `"default";r=5999;t=1`.'},
}


def document() -> dict[str, Any]:
    schemas: dict[str, Any] = {"ErrorEnvelope": _error_envelope()}
    paths: dict[str, dict[str, Any]] = {}
    resources = _Resources()
    for op in OPERATIONS.values():
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, schemas, resources)
    paths.update(feeds.OPENAPI)
    clash = set(schemas) & set(resources.schemas)
    assert not clash, f"response and request schemas share names: {clash}"
    schemas.update(resources.schemas)
    return honest_defaults({
        "openapi": "3.1.0",
        "info": {
            "title": "Kalends API",
            "version": "1.1.0",
            "description": "Scheduling and event publishing: profiles, events, series, RSVPs, "
            "calendars, subscriptions, follows, search and the agenda.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "responses": {
                "Error": {
                    "description": "An error, in the API's envelope (docs/http.md, \"Errors\").",
                    "headers": {"X-Request-Id": {"schema": {"type": "string"}}},
                    "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
                },
                "RateLimited": {
                    "description": "Past the rate limit (rate_limit_exceeded).",
                    "headers": {
                        "X-Request-Id": {"schema": {"type": "string"}},
                        "Retry-After": {"schema": {"type": "integer", "minimum": 1},
                                        "description": "Seconds until a request is allowed."},
                        **_RATE_LIMIT_HEADERS,
                    },
                    "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
                },
            },
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "An API key issued by `kalends admin`."},
            },
        },
    })


class _Resources:
    """Response objects as shared components, one per GraphQL type (Event, Profile,
    EventPage, ...), so that generated clients get one model per resource.

    Selections of a type share one component holding every key any of them selects;
    a key that not all of them select is optional there (an event's `expand` keys),
    and says which answers always carry it (createProfile's `organization_id`). Only
    selections that give one key different schemas get components of their own,
    numbered."""

    def __init__(self) -> None:
        self._schemas: dict[str, dict[str, Any]] = {}
        # (component, key) -> the operations whose answers always carry the key.
        self._always: dict[tuple[str, str], set[str]] = {}

    def shared(self, schema: Any, operation: str) -> Any:
        """`schema` with every titled object replaced by a `$ref` to its component."""
        if isinstance(schema, list):
            return [self.shared(item, operation) for item in schema]
        if not isinstance(schema, dict):
            return schema
        out = {key: self.shared(value, operation) for key, value in schema.items()}
        kind = out.get("type")
        if "title" not in out or "properties" not in out:
            return out
        nullable = isinstance(kind, list)
        component = {**out, "type": "object"}
        name = self._name(component)
        for key in component["required"]:
            self._always.setdefault((name, key), set()).add(operation)
        ref = {"$ref": _REF.format(model=name)}
        return {"anyOf": [ref, {"type": "null"}]} if nullable else ref

    @property
    def schemas(self) -> dict[str, dict[str, Any]]:
        """The components, each key that only some answers carry described as such."""
        out = {}
        for name, schema in self._schemas.items():
            properties = dict(schema["properties"])
            for key in set(properties) - set(schema["required"]):
                operations = sorted(self._always.get((name, key), ()))
                if operations:
                    properties[key] = {**properties[key], "description": (
                        f"Always in the answer to {', '.join(operations)}; not in others.")}
            out[name] = {**schema, "properties": properties}
        return out

    def _name(self, schema: dict[str, Any]) -> str:
        base = str(schema.pop("title"))
        name, n = base, 1
        while name in self._schemas:
            merged = _merged(self._schemas[name], schema)
            if merged is not None:
                self._schemas[name] = merged
                return name
            n += 1
            name = f"{base}{n}"
        self._schemas[name] = schema
        return name


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """One schema for both: every key of either, required where both require it.
    None when a key they share has different schemas, or is required in one only."""
    both = a["properties"].keys() & b["properties"].keys()
    if any(a["properties"][key] != b["properties"][key] for key in both):
        return None
    if both & set(a["required"]) != both & set(b["required"]):
        return None
    required = [key for key in a["required"] if key in b["required"]]
    return {**a, "properties": {**a["properties"], **b["properties"]}, "required": required}


def _operation(op: Operation, schemas: dict[str, Any], resources: _Resources) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operationId": op.name,
        "summary": op.summary,
        "description": op.mcp.description,
        "tags": [op.tag],
        "parameters": _parameters(op),
        "responses": _responses(op, resources),
    }
    if op.body is not None:
        body = op.body.model_json_schema(ref_template=_REF)
        schemas.update(body.pop("$defs", {}))
        schemas[op.body.__name__] = body
        out["requestBody"] = {
            "required": any(f.is_required() for f in op.body.model_fields.values()),
            "content": {"application/json": {
                "schema": {"$ref": _REF.format(model=op.body.__name__)}}},
        }
    return out


def _parameters(op: Operation) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    for location, model in (("path", op.path_model), ("query", op.query_model)):
        schema = model.model_json_schema()
        required = set(schema.get("required", []))
        for name, prop in schema.get("properties", {}).items():
            prop = _without_null(prop)
            description = prop.pop("description", None)
            prop.pop("title", None)
            param: dict[str, Any] = {
                "name": name, "in": location, "required": name in required or location == "path",
                "schema": prop,
            }
            if description:
                param["description"] = description
            params.append(param)
    if op.creates:
        params.append({
            "name": "Idempotency-Key", "in": "header", "required": False,
            "description": "Validated and logged; not deduplicated in this API version.",
            "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{8,255}$"},
        })
    return params


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """Query strings have no null: `T | None` documents as `T`."""
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        if len(options) == 1:
            rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
            return {**options[0], **rest}
    return dict(schema)


def _responses(op: Operation, resources: _Resources) -> dict[str, Any]:
    headers: dict[str, Any] = {"X-Request-Id": {"schema": {"type": "string"}},
                               **_RATE_LIMIT_HEADERS}
    success: dict[str, Any] = {"description": op.summary, "headers": headers}
    if op.location is not None:
        headers["Location"] = {"schema": {"type": "string"},
                               "description": "Path of the created resource."}
    if op.response_schema is not None:
        success["content"] = {"application/json": {
            "schema": resources.shared(op.response_schema, op.name)}}
    responses: dict[str, Any] = {str(op.status): success}
    if op.created is not None:  # the same body when an existing resource is replaced
        replaced = {k: v for k, v in success.items() if k != "headers"}
        responses["200"] = {**replaced, "headers": {
            k: v for k, v in headers.items() if k != "Location"}}
    codes = ["400", "401", "403", "404", "405", "500", "503"]
    if op.body is not None:
        codes += ["409", "413", "415"]
    for code in sorted(codes):
        responses[code] = _ERROR_REF
    responses["429"] = {"$ref": "#/components/responses/RateLimited"}
    return responses



def _error_envelope() -> dict[str, Any]:
    strings = ["value", "expected_offset", "gap_from", "gap_to", "start", "end"]
    details = {
        "type": "object",
        "properties": {
            **{k: {"type": "string"} for k in strings},
            "expected_shapes": {"type": "array", "items": {"type": "string"}},
            "valid_offsets": {"type": "array", "items": {"type": "string"}},
        },
        "additionalProperties": False,
    }
    error = {
        "type": "object",
        "required": ["type", "code", "message"],
        "additionalProperties": False,
        "properties": {
            "type": {"type": "string", "enum": ERROR_TYPES},
            "code": {"type": "string", "enum": ERROR_CODES},
            "message": {"type": "string"},
            "param": {"type": "string"},
            "request_id": {"type": "string"},
            "details": details,
        },
    }
    return {"type": "object", "required": ["error"], "additionalProperties": False,
            "properties": {"error": error}}
