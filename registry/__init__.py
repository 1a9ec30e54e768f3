"""The operation registry: each public operation declared once.

An `Operation` holds its operationId, its hand-written GraphQL document, its
REST binding (method, path, where each variable comes from), its MCP tool
description and hints, and how its result is shaped. The REST routes, the MCP
tools and the OpenAPI document are all generated from `OPERATIONS`.

Documents are parsed, validated and compiled into execution plans once, by
`prepare`, at start-up; a broken document, or one a plan cannot run, stops the
start. Requests then run the plan (graph/plan.py): the schema's own resolvers,
without per-request parsing, validation or graphql-core's generic executor.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    parse,
    validate,
)
from multidict import MultiDict
from pydantic import BaseModel, ConfigDict, Field, create_model

from core.errors import ApiError, internal_error
from db.database import Database, unavailable
from domain.auth import Viewer
from domain.validation import Location
from domain.validation import validate as validate_model
from graph.context import Context, Services
from graph.plan import Plan, Text, Unsupported, compile_operation
from registry import narrow

if TYPE_CHECKING:
    from db.database import Tx

log = logging.getLogger("kalends.registry")
S = TypeVar("S")


@dataclass(frozen=True)
class Param:
    """A path or query parameter, bound to the GraphQL variable of the same name."""

    name: str
    location: Literal["path", "query"]
    annotation: Any
    description: str
    default: Any = ...
    variables: Callable[[Any], dict[str, Any]] | None = None
    """Maps the validated value to GraphQL variables; by default `{name: value}`."""


@dataclass(frozen=True)
class Mcp:
    title: str
    description: str
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    @property
    def annotations(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": False,
        }


@dataclass(frozen=True, eq=False)  # each one declared once: its identity is its key
class Operation:
    name: str
    method: str
    path: str
    summary: str
    document: str
    result: str | None
    """Dotted path in the GraphQL result to the REST body; None: 204, no body."""
    mcp: Mcp
    tag: str
    params: tuple[Param, ...] = ()
    body: type[BaseModel] | None = None
    status: int = 200
    creates: bool = False
    """A create: accepts an Idempotency-Key, validated and logged, never deduplicated
    (docs/api-choices.md, opening list)."""
    created: str | None = None
    """Dotted path to a Boolean telling a create (201) from a replace (200)."""
    no_body_status: str | None = None
    """What an MCP call reports for a 204 operation: deleted, removed, linked."""
    location: str | None = None
    """Path template of the created resource, formatted with the REST body."""
    omit_null: tuple[str, ...] = ()
    """Dotted paths in the REST body (through lists) of keys that are left out, not
    null, when they do not apply; their schema is then optional and non-null."""
    _prepared: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def path_model(self) -> type[BaseModel]:
        return _params_model(f"{self.name}Path", [p for p in self.params if p.location == "path"])

    @cached_property
    def query_model(self) -> type[BaseModel]:
        return _params_model(
            f"{self.name}Query", [p for p in self.params if p.location == "query"]
        )

    @property
    def plan(self) -> Plan:
        """The document, parsed, validated and compiled (graph/plan.py)."""
        try:
            return self._prepared["plan"]  # type: ignore[no-any-return]
        except KeyError:
            raise RuntimeError(f"operation {self.name} used before prepare()") from None

    @property
    def writes(self) -> bool:
        """A mutation: run in a write's unit of work (registry/calls.py)."""
        return self.plan.operation.operation is OperationType.MUTATION

    @property
    def response_schema(self) -> dict[str, Any] | None:
        return self._prepared.get("response_schema")

    @property
    def resource(self) -> narrow.Resource | None:
        """The resource the operation answers (one, or a page of them), which MCP's
        `fields` narrows; None for an answer that is no resource."""
        if "resource" not in self._prepared:
            self._prepared["resource"] = narrow.resource(self.response_schema, self.result)
        return self._prepared["resource"]  # type: ignore[no-any-return]

    def tool_input_schema(self) -> dict[str, Any]:
        """One flat object: path parameters, query parameters and body fields."""
        properties: dict[str, Any] = {}
        required: list[str] = []
        defs: dict[str, Any] = {}
        for model in (self.path_model, self.query_model, self.body):
            if model is None:
                continue
            schema = model.model_json_schema()
            defs.update(schema.pop("$defs", {}))
            properties.update(schema.get("properties", {}))
            required.extend(schema.get("required", []))
        out: dict[str, Any] = {
            "type": "object", "properties": properties, "additionalProperties": False,
        }
        if required:
            out["required"] = required
        if defs:
            out["$defs"] = defs
        return _untitled(honest_defaults(out))


def honest_defaults(schema: S) -> S:
    """Drop every `default: null` that its own schema refuses, in place.

    Request models mark "omitted" with a None default on fields that refuse an
    explicit null (PATCH bodies); pydantic then advertises `default: null`, which
    a client or a model sending the advertised default would see refused. Omitted
    is expressed by absence alone."""
    if isinstance(schema, dict):
        if "default" in schema and schema["default"] is None and not _accepts_null(schema):
            del schema["default"]
        for value in schema.values():
            honest_defaults(value)
    elif isinstance(schema, list):
        for item in schema:
            honest_defaults(item)
    return schema


def _untitled(schema: S) -> S:
    """Without pydantic's `title` keywords ("Start Time" for start_time): they repeat
    the property names and take a tenth of the tool catalogue an agent reads."""
    if isinstance(schema, dict):
        for key, value in list(schema.items()):
            if key == "title" and isinstance(value, str):
                del schema[key]
            elif key in ("properties", "$defs") and isinstance(value, dict):
                for inner in value.values():
                    _untitled(inner)
            else:
                _untitled(value)
    elif isinstance(schema, list):
        for item in schema:
            _untitled(item)
    return schema


def _accepts_null(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if "const" in schema:
        return schema["const"] is None
    if "enum" in schema:
        return None in schema["enum"]
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return any(isinstance(o, dict) and _accepts_null(o) for o in options)
    return kind is None and "$ref" not in schema and "pattern" not in schema


def _params_model(name: str, params: list[Param]) -> type[BaseModel]:
    fields: dict[str, Any] = {
        p.name: (p.annotation, _field(p)) for p in params
    }
    config = ConfigDict(extra="forbid")
    return create_model(name, __config__=config, **fields)


def _field(p: Param) -> Any:
    if p.default is ...:
        return Field(description=p.description)
    return Field(default=p.default, description=p.description)


# ---------------------------------------------------------------------------
# The registry itself

OPERATIONS: dict[str, Operation] = {}


def register(*operations: Operation) -> None:
    for op in operations:
        if op.name in OPERATIONS:
            raise ValueError(f"operation {op.name} declared twice")
        OPERATIONS[op.name] = op


class InvalidDocument(RuntimeError):
    """A document that does not validate, or that a plan cannot run."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid operation documents:\n  " + "\n  ".join(problems))
        self.problems = problems


def compile_document(schema: GraphQLSchema, name: str, source: str
                     ) -> tuple[DocumentNode, Plan]:
    """Parse, validate and compile a document that holds one operation, named
    `name`; `InvalidDocument` says what is wrong with it."""
    ast = parse(Text(source))
    errors = validate(schema, ast)
    if errors:
        raise InvalidDocument([f"{name}: {e.message}" for e in errors])
    names = [d.name.value for d in ast.definitions
             if isinstance(d, OperationDefinitionNode) and d.name]
    if names != [name]:
        raise InvalidDocument([f"{name}: the document must hold exactly one operation named so"])
    try:
        return ast, compile_operation(schema, ast)
    except Unsupported as e:
        raise InvalidDocument([f"{name}: cannot be compiled into a plan: {e}"]) from None


NARROWED: list[narrow.Narrowed] = []
"""The narrowed plans of the schema `prepare` compiled the documents for."""


def prepare(schema: GraphQLSchema) -> None:
    """Parse and validate every document against the schema; fail loudly."""
    NARROWED[:] = [narrow.Narrowed(schema)]
    problems: list[str] = []
    for op in OPERATIONS.values():
        try:
            ast, plan = compile_document(schema, op.name, op.document)
        except InvalidDocument as e:
            problems.extend(e.problems)
            continue
        op._prepared["plan"] = plan
        if op.result is not None:
            response = _response_schema(schema, ast, op.result)
            try:
                for path in op.omit_null:
                    _optional_key(response, path.split("."))
            except KeyError:
                problems.append(f"{op.name}: omit_null path {path} is not in the result")
                continue
            op._prepared["response_schema"] = response
    if problems:
        raise InvalidDocument(problems)


# ---------------------------------------------------------------------------
# Binding: from a transport's inputs to GraphQL variables


def bind(
    op: Operation,
    path: Mapping[str, Any],
    query: Mapping[str, Any],
    body: Any,
    *,
    query_location: Location = "query",
) -> dict[str, Any]:
    if op.body is None:
        # A read's variables follow from its path and query alone, and a client asks
        # for the same page again and again: each distinct request is validated once.
        key = (tuple(path.items()), tuple(query.items()))
        return dict(_bound(op, key[0], key[1], query_location))
    return _bind(op, path, query, body, query_location)


@lru_cache(maxsize=2048)
def _bound(op: Operation, path: tuple[tuple[str, Any], ...], query: tuple[tuple[str, Any], ...],
           query_location: Location) -> dict[str, Any]:
    """`_bind` of a body-less operation, kept (its answer is copied, never shared)."""
    return _bind(op, dict(path), MultiDict(query), None, query_location)


def _bind(op: Operation, path: Mapping[str, Any], query: Mapping[str, Any], body: Any,
          query_location: Location) -> dict[str, Any]:
    variables: dict[str, Any] = {}
    variables.update(validate_model(op.path_model, dict(path), location="path").model_dump())
    values = validate_model(op.query_model, dict(query), location=query_location).model_dump()
    for param in op.params:
        if param.location == "query" and param.variables is not None:
            variables.update(param.variables(values.pop(param.name)))
    variables.update(values)
    if op.body is not None:
        if not isinstance(body, dict):
            raise ApiError("invalid_json", "The request body must be a JSON object.")
        parsed = validate_model(op.body, body)
        variables["input"] = parsed.model_dump(exclude_unset=True)
    return variables


def bind_flat(op: Operation, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """MCP arguments are one flat object; split it by where each name belongs."""
    path_names = set(op.path_model.model_fields)
    query_names = set(op.query_model.model_fields)
    path = {k: v for k, v in arguments.items() if k in path_names}
    query = {k: v for k, v in arguments.items() if k in query_names}
    rest = {k: v for k, v in arguments.items() if k not in path_names | query_names}
    if op.body is None and rest:
        name = sorted(rest)[0]
        raise ApiError("unknown_field", f"Unknown argument `{name}`.", param=name)
    return bind(op, path, query, rest, query_location="body")


# ---------------------------------------------------------------------------
# Execution


async def execute(plan: Plan, name: str, variables: dict[str, Any], context: Context
                  ) -> dict[str, Any]:
    """Run a compiled document; its data, or the `ApiError` a rule raised, or
    `service_unavailable` for a lost database connection, whatever connection a
    resolver met it on. Any other error is logged and answered as `internal_error`."""
    result = await plan.execute(context, variables)
    if result.errors:
        for error in result.errors:
            if isinstance(error.original_error, ApiError):
                raise error.original_error
            if error.original_error is not None:
                lost = unavailable(error.original_error)
                if lost is not None:
                    raise lost from error.original_error
        log.error(
            "operation failed", exc_info=result.errors[0].original_error or result.errors[0],
            extra={"operation": name, "request_id": context.request_id},
        )
        raise internal_error()
    assert result.data is not None
    return result.data


async def run(op: Operation, variables: dict[str, Any], context: Context,
              fields: frozenset[str] | None = None) -> tuple[Any, int]:
    """Execute the pre-validated document (narrowed to the resource's `fields`, when
    given: `narrow.check`'s); return the REST body and status."""
    plan = op.plan
    if fields is not None:
        found = op.resource
        assert found is not None and NARROWED, "fields only for a resource, after prepare()"
        plan = NARROWED[0].plan(op.name, op.document, found, fields)
    data = await execute(plan, op.name, variables, context)
    if op.result is None:
        return None, op.status
    status = op.status
    if op.created is not None and not _at(data, op.created):
        status = 200
    body = _at(data, op.result)
    for path in op.omit_null:
        _drop_nulls(body, path.split("."))
    return body, status


def _at(data: Any, path: str) -> Any:
    for key in path.split("."):
        data = data[key]
    return data


def _drop_nulls(data: Any, keys: list[str]) -> None:
    """Remove the null values at `keys` under `data`, walking lists and skipping nulls."""
    if isinstance(data, list):
        for item in data:
            _drop_nulls(item, keys)
    elif isinstance(data, dict):
        if len(keys) == 1:
            if keys[0] in data and data[keys[0]] is None:
                del data[keys[0]]
        else:
            _drop_nulls(data.get(keys[0]), keys[1:])


def context(services: Services, viewer: Viewer, request_id: str, *, read_only: bool = False,
            tx: Tx | None = None) -> Context:
    """The one way an operation's context is built. A request that only reads may
    be served by a read replica; given a write's transaction `tx` (a webhook
    message's body, registry/payloads.py), every statement runs in it."""
    if tx is not None:
        return Context(dataclasses.replace(services, db=cast(Database, tx)), viewer, request_id)
    return Context(services, viewer, request_id, read_only=read_only)


# ---------------------------------------------------------------------------
# Response schemas, derived from each document's selection set


_SCALARS: dict[str, dict[str, Any]] = {
    "String": {"type": "string"},
    "ID": {"type": "string"},
    "Int": {"type": "integer"},
    "Float": {"type": "number"},
    "Boolean": {"type": "boolean"},
    "Timestamp": {"type": "string", "format": "date-time"},
    "DateTime": {"type": "string", "format": "date-time"},
    "Date": {"type": "string", "format": "date"},
}


def _response_schema(schema: GraphQLSchema, ast: DocumentNode, root: str) -> dict[str, Any]:
    fragments = {d.name.value: d for d in ast.definitions if isinstance(d, FragmentDefinitionNode)}
    operation = next(d for d in ast.definitions if isinstance(d, OperationDefinitionNode))
    root_type = schema.get_root_type(operation.operation)
    assert root_type is not None
    out: dict[str, Any] = _selection_schema(root_type, operation.selection_set, fragments)
    for key in root.split("."):
        out = out["properties"][key]
    return out


def _optional_key(schema: dict[str, Any], keys: list[str]) -> None:
    """Mark the key at `keys` (through arrays) optional and non-null; KeyError if absent."""
    while schema.get("type") == "array" or schema.get("type") == ["array", "null"]:
        schema = schema["items"]
    prop = schema["properties"][keys[0]]
    if len(keys) > 1:
        _optional_key(prop, keys[1:])
        return
    if isinstance(prop["type"], list):
        prop["type"] = next(t for t in prop["type"] if t != "null")
    if keys[0] in schema["required"]:
        schema["required"].remove(keys[0])


def _selection_schema(
    parent: GraphQLObjectType, selection: SelectionSetNode,
    fragments: dict[str, FragmentDefinitionNode],
) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for node in narrow.fields(selection, fragments):
        key = node.alias.value if node.alias else node.name.value
        properties[key] = _type_schema(parent.fields[node.name.value].type, node, fragments)
        # A field under @include/@skip appears only when asked for (`expand`).
        if not node.directives:
            required.append(key)
    # The title names the GraphQL type: the OpenAPI document shares one component per
    # resource by it (rest_bridge/openapi.py).
    return {
        "title": parent.name, "type": "object", "properties": properties,
        "required": required, "additionalProperties": False,
    }


def _type_schema(gtype: Any, node: FieldNode, fragments: dict[str, FragmentDefinitionNode]
                 ) -> dict[str, Any]:
    nullable = not isinstance(gtype, GraphQLNonNull)
    if not nullable:
        gtype = gtype.of_type
    if isinstance(gtype, GraphQLList):
        inner = _type_schema(gtype.of_type, node, fragments)
        schema: dict[str, Any] = {"type": "array", "items": inner}
    elif isinstance(gtype, GraphQLObjectType):
        assert node.selection_set is not None
        schema = _selection_schema(gtype, node.selection_set, fragments)
    else:
        schema = dict(_SCALARS[gtype.name])
    if nullable:
        schema["type"] = [schema["type"], "null"]
    return schema
