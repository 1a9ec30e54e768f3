"""An operation's document narrowed to the fields a caller asks for (MCP's `fields`,
docs/mcp.md): what an agent pays for is context, and every tool is a GraphQL document,
so the answer can hold exactly the resource's fields it needs.

The resource is what the operation answers: its REST body when that is an object with
an `id` (a get, a create, an update), or an occurrence's `occurrence_id`
(docs/occurrences.md), or the items of its page (`data` of a body with `data`,
`has_more` and `next_cursor`). Narrowing keeps, in the resource's selection, the
top-level fields asked for and that key, each with its whole sub-selection, and drops
the rest (fragments inlined at that level, unused ones dropped). The local times an
agent reads (`local_start_time`, `local_end_time`: docs/mcp.md, "Local times"), which no
REST document selects, are added at that level when asked for. A narrowed document is
compiled into a plan once and kept, per operation and set of fields, a bounded number
of them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    NameNode,
    Node,
    OperationDefinitionNode,
    SelectionSetNode,
    VariableNode,
    Visitor,
    parse,
    print_ast,
    visit,
)

from core.errors import ApiError
from graph.plan import Plan

MAX_PLANS = 512
"""Narrowed plans kept, over every operation (the least recently used go first)."""
LOCAL_TIMES = ("local_start_time", "local_end_time")
"""Fields an agent's answer adds to a resource whose GraphQL type has them."""
KEYS = ("id", "occurrence_id")
"""What names a resource: its `id`, or, for an occurrence, which has none, its
`occurrence_id`."""


@dataclass(frozen=True)
class Resource:
    """Where an operation's resource is, and what it holds."""

    path: tuple[str, ...]
    """Response keys from the result's root to the resource (a page's: to `data`)."""
    page: bool
    fields: tuple[str, ...]
    """Its top-level fields, in the document's order."""
    conditional: frozenset[str] = frozenset()
    """Those the document selects only when asked (`@include`: an `expand`)."""
    key: str = "id"
    """The field that names it (`KEYS`), in every answer whatever `fields` asked."""


def resource(response_schema: dict[str, Any] | None, result: str | None) -> Resource | None:
    """The operation's resource, from its REST body's schema; None when it answers no
    resource (no body, or one without a key of `KEYS`: an agenda, free/busy, stats)."""
    if response_schema is None or result is None:
        return None
    path = tuple(result.split("."))
    properties = response_schema.get("properties", {})
    if {"data", "has_more", "next_cursor"} <= set(properties):
        items = properties["data"].get("items", {})
        key = _key_of(items)
        return None if key is None else Resource((*path, "data"), True, *_fields(items), key)
    key = _key_of(response_schema)
    return None if key is None else Resource(path, False, *_fields(response_schema), key)


def _key_of(schema: dict[str, Any]) -> str | None:
    return next((k for k in KEYS if k in schema.get("properties", {})), None)


def _fields(schema: dict[str, Any]) -> tuple[tuple[str, ...], frozenset[str]]:
    """An object schema's properties, and those it does not require: the registry
    requires every field a document selects unconditionally."""
    names = tuple(schema["properties"])
    return names, frozenset(names) - frozenset(schema.get("required", ()))


def with_local_times(found: Resource, response_schema: dict[str, Any], schema: GraphQLSchema
                     ) -> Resource:
    """The resource as an agent reads it: with the local times its GraphQL type has (the
    type the response schema's resource is titled with)."""
    target = response_schema["properties"]["data"]["items"] if found.page else response_schema
    gtype = schema.get_type(str(target.get("title", "")))
    if not isinstance(gtype, GraphQLObjectType):
        return found
    added = tuple(n for n in LOCAL_TIMES if n in gtype.fields and n not in found.fields)
    return Resource(found.path, found.page, found.fields + added, found.conditional, found.key)


def check(found: Resource, fields: Any) -> frozenset[str]:
    """The fields asked for (the resource's key always among them), or `invalid_field`."""
    valid = ", ".join(found.fields)
    if not isinstance(fields, list) or not fields or \
            not all(isinstance(f, str) for f in fields):
        raise ApiError("invalid_field", f"`fields` must be a non-empty array of field names "
                       f"of the resource: {valid}.", param="fields", details={"value": fields})
    unknown = [f for f in fields if f not in found.fields]
    if unknown:
        raise ApiError("invalid_field", f"Unknown field{'s' if len(unknown) > 1 else ''} "
                       f"{', '.join(unknown)} in `fields`; the resource's fields are: {valid}.",
                       param="fields", details={"value": unknown[0]})
    return frozenset({*fields, found.key})


class Narrowed:
    """The narrowed plans of every operation, compiled on first use and kept."""

    def __init__(self, schema: GraphQLSchema, max_plans: int = MAX_PLANS) -> None:
        self._schema = schema
        self._max = max_plans
        self._plans: OrderedDict[tuple[str, frozenset[str]], Plan] = OrderedDict()

    def __len__(self) -> int:
        return len(self._plans)

    @property
    def schema(self) -> GraphQLSchema:
        return self._schema

    def plan(self, name: str, document: str, found: Resource, fields: frozenset[str]) -> Plan:
        key = (name, fields)
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        from registry import compile_document

        text = print_ast(narrow(parse(document), found.path, fields))
        _, plan = compile_document(self._schema, name, text)
        self._plans[key] = plan
        while len(self._plans) > self._max:
            self._plans.popitem(last=False)
        return plan


def narrow(document: DocumentNode, path: Sequence[str], keep: Iterable[str]) -> DocumentNode:
    """`document` with the selection at `path` (response keys from the operation's
    root) holding only the fields whose response keys are in `keep`."""
    keep = frozenset(keep)
    fragments = {d.name.value: d for d in document.definitions
                 if isinstance(d, FragmentDefinitionNode)}
    operation = next(d for d in document.definitions if isinstance(d, OperationDefinitionNode))
    selection = _narrowed(operation.selection_set, list(path), keep, fragments)
    used = _spread(selection, fragments, set())
    kept = tuple(fragments[name] for name in fragments if name in used)
    # Variables only the dropped fields used go too (a document must use each one);
    # a request may still send them: they are then ignored.
    variables = _variables((selection, *(f.selection_set for f in kept),
                            *(operation.directives or ())))
    operation = OperationDefinitionNode(
        operation=operation.operation, name=operation.name,
        variable_definitions=tuple(v for v in operation.variable_definitions or ()
                                   if v.variable.name.value in variables),
        directives=operation.directives, selection_set=selection)
    return DocumentNode(definitions=(operation, *kept))


def _variables(nodes: Iterable[Node]) -> set[str]:
    found: set[str] = set()

    class _Used(Visitor):
        def enter_variable(self, node: VariableNode, *_: Any) -> None:
            found.add(node.name.value)

    for node in nodes:
        visit(node, _Used())
    return found


def _narrowed(selection: SelectionSetNode, path: list[str], keep: frozenset[str],
              fragments: dict[str, FragmentDefinitionNode]) -> SelectionSetNode:
    found = fields(selection, fragments)
    if not path:
        kept = [f for f in found if _key(f) in keep]
        present = {_key(f) for f in kept}
        # The local times no document selects, when asked for (the type has them:
        # the plan's compilation checks).
        kept += [FieldNode(name=NameNode(value=n), arguments=(), directives=())
                 for n in LOCAL_TIMES if n in keep and n not in present]
        return SelectionSetNode(selections=tuple(kept))
    out = []
    for node in found:
        if _key(node) == path[0]:
            assert node.selection_set is not None
            node = FieldNode(alias=node.alias, name=node.name, arguments=node.arguments,
                             directives=node.directives,
                             selection_set=_narrowed(node.selection_set, path[1:], keep,
                                                     fragments))
        out.append(node)
    return SelectionSetNode(selections=tuple(out))


def fields(selection: SelectionSetNode, fragments: dict[str, FragmentDefinitionNode]
           ) -> list[FieldNode]:
    """The fields of one level of a selection, fragments inlined (every type the
    registry's documents select is an object type)."""
    out: list[FieldNode] = []
    for node in selection.selections:
        if isinstance(node, FieldNode):
            out.append(node)
        elif isinstance(node, FragmentSpreadNode):
            out.extend(fields(fragments[node.name.value].selection_set, fragments))
        elif isinstance(node, InlineFragmentNode):
            out.extend(fields(node.selection_set, fragments))
    return out


def _spread(selection: SelectionSetNode | None, fragments: dict[str, FragmentDefinitionNode],
            found: set[str]) -> set[str]:
    """The fragments `selection` spreads, directly or through others."""
    for node in selection.selections if selection is not None else ():
        if isinstance(node, FragmentSpreadNode):
            if node.name.value not in found:
                found.add(node.name.value)
                _spread(fragments[node.name.value].selection_set, fragments, found)
        elif isinstance(node, FieldNode | InlineFragmentNode):
            _spread(node.selection_set, fragments, found)
    return found


def _key(node: FieldNode) -> str:
    return node.alias.value if node.alias else node.name.value
