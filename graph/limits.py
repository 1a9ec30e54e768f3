"""Bounds on what one `/graphql` request may ask for.

Dashboards send arbitrary documents with any key; without bounds, one request of
40 aliases x 100 events costs the server most of a second and half a megabyte.
The registry's fixed documents (REST and MCP) never pass through these rules:
they are validated once at start-up with graphql-core's own rules only.
"""

from __future__ import annotations

from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValidationRule,
    get_named_type,
)
from strawberry.extensions import AddValidationRules

from kalends.pagination import MAX_LIMIT

# The deepest registry document is 5 levels (agenda items' profile); the standard
# introspection query (`... ofType { ofType ... } }`) reaches about 12.
MAX_DEPTH = 15
# A dashboard asks for a handful of things at once; 40 aliased lists is a flood.
MAX_ALIASES = 15
# Objects one request may return, counted before it runs: a list with `limit`
# counts that many times what it selects (MAX_LIMIT when the limit is a variable,
# its default when it is not given), so a connection inside a connection costs its
# parent's `limit` times over, down the path (GitHub's node limit); other fields
# count once. Ten full pages of 100, with what they select.
MAX_COST = 2000


class QueryLimits(ValidationRule):
    """Refuse an operation with more than MAX_ALIASES aliases, nested deeper than
    MAX_DEPTH, or whose worst-case object count exceeds MAX_COST, each with its
    `extensions.code`. (Strawberry's QueryDepthLimiter skips introspection, the only
    place where this schema's types nest without end; its MaxAliasesLimiter gives
    no code.)"""

    def enter_operation_definition(self, node: OperationDefinitionNode, *_: Any) -> None:
        fragments = {
            d.name.value: d for d in self.context.document.definitions
            if isinstance(d, FragmentDefinitionNode)
        }
        root = self.context.schema.get_root_type(node.operation)
        depth, cost, aliases = _measure(node.selection_set, root, self.context.schema,
                                        fragments, set())
        if aliases > MAX_ALIASES:
            self.report_error(GraphQLError(
                f"Query uses {aliases} aliases, more than the limit of {MAX_ALIASES}.",
                node, extensions={"code": "query_too_many_aliases", "aliases": aliases,
                                  "limit": MAX_ALIASES},
            ))
            return
        if depth > MAX_DEPTH:
            self.report_error(GraphQLError(
                f"Query depth {depth} exceeds the limit of {MAX_DEPTH} nested fields.",
                node, extensions={"code": "query_too_deep", "depth": depth,
                                  "limit": MAX_DEPTH},
            ))
            return
        if cost > MAX_COST:
            self.report_error(GraphQLError(
                f"Query cost {cost} exceeds the limit of {MAX_COST} (the objects one request "
                "may return: each list counts its `limit`). Ask for less, or page.",
                node, extensions={"code": "query_too_costly", "cost": cost, "limit": MAX_COST},
            ))


def _measure(selection: SelectionSetNode | None, parent: GraphQLNamedType | None,
             schema: GraphQLSchema, fragments: dict[str, FragmentDefinitionNode],
             seen: set[str]) -> tuple[int, int, int]:
    """(depth, cost, aliases) of a selection set on type `parent` (None where the
    document names no such type: validation reports that), fragments spread in
    place (a fragment spread twice counts its aliases twice)."""
    if selection is None:
        return 0, 0, 0
    depth = cost = aliases = 0
    for node in selection.selections:
        if isinstance(node, FieldNode):
            default, inner_type = _field(parent, node.name.value)
            inner_depth, inner_cost, inner_aliases = _measure(node.selection_set, inner_type,
                                                              schema, fragments, seen)
            depth = max(depth, 1 + inner_depth)
            aliases += inner_aliases + (node.alias is not None)
            if node.selection_set is not None:
                cost += _multiplier(node, default) * (1 + inner_cost)
            continue
        if isinstance(node, InlineFragmentNode):
            inner, within = node.selection_set, seen
            condition = node.type_condition
        elif isinstance(node, FragmentSpreadNode):
            name = node.name.value
            if name not in fragments or name in seen:  # cycles are NoFragmentCycles' job
                continue
            inner, within = fragments[name].selection_set, seen | {name}
            condition = fragments[name].type_condition
        else:
            continue
        on = schema.get_type(condition.name.value) if condition is not None else parent
        inner_depth, inner_cost, inner_aliases = _measure(inner, on, schema, fragments, within)
        depth, cost, aliases = max(depth, inner_depth), cost + inner_cost, aliases + inner_aliases
    return depth, cost, aliases


def _field(parent: GraphQLNamedType | None, name: str) -> tuple[int, GraphQLNamedType | None]:
    """The default `limit` of field `name` of `parent` (1 for a field without one) and
    the named type it returns."""
    if not isinstance(parent, GraphQLObjectType) or name not in parent.fields:
        return 1, None
    definition = parent.fields[name]
    limit = definition.args.get("limit")
    default = limit.default_value if limit is not None else None
    return (default if isinstance(default, int) else 1), get_named_type(definition.type)


def _multiplier(node: FieldNode, default: int) -> int:
    for argument in node.arguments or ():
        if argument.name.value == "limit":
            if isinstance(argument.value, IntValueNode):
                return max(1, int(argument.value.value))
            return MAX_LIMIT
    return default


def extensions() -> list[Any]:
    return [lambda: AddValidationRules([QueryLimits])]


__all__ = ["MAX_ALIASES", "MAX_COST", "MAX_DEPTH", "QueryLimits", "extensions"]
