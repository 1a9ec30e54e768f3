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
    StringValueNode,
    ValidationRule,
    get_named_type,
)
from strawberry.extensions import AddValidationRules

from domain import dashboard, expansion
from domain.pagination import MAX_LIMIT

# The deepest registry document is 5 levels (agenda items' profile); the standard
# introspection query (`... ofType { ofType ... } }`) reaches about 12.
MAX_DEPTH = 15
# A dashboard asks for a handful of things at once; 40 aliased lists is a flood.
MAX_ALIASES = 15
# Objects one request may return, counted before it runs: a list with `limit`
# counts that many times what it selects (MAX_LIMIT when the limit is a variable,
# its default when it is not given), so a connection inside a connection costs its
# parent's `limit` times over, down the path (GitHub's node limit); a list without
# `limit` counts its largest size (SIZES); other fields count once. Ten full pages
# of 100, with what they select.
MAX_COST = 2000
# Occurrences one request may ask to expand, counted the same way: `occurrences`
# counts its largest size (500) and `rsvp_summary` its buckets times the recurring
# events it may read, times the limits of the lists above them. Most windows hold
# far fewer occurrences than a field's largest size (a weekly event has one in a
# week), so this is looser than the request's expansion budget, which bounds the
# work actually done (domain/expansion.py: exact or `expansion_limit`).
MAX_EXPANSION = 25 * expansion.MAX_OCCURRENCES

SIZES: dict[tuple[str, str], int] = {
    # Lists of objects without a `limit`: their largest size (tests/graph/test_graphql_limits.py
    # fails on a new one missing here).
    ("Agenda", "items"): expansion.MAX_ITEMS,
    ("Agenda", "sources"): 100,  # calendar_ids: at most 100
    ("Agenda", "warnings"): 100,
    ("FreeBusy", "people"): 21,  # the caller and at most 20 others
    ("FreeBusy", "sources"): 100,
    ("FreeBusy", "warnings"): 100,
    ("FreeBusyPerson", "busy"): 1,  # merged intervals, on each person's own budget
    ("MeetingTimes", "data"): 50,  # `limit` in the input: at most 50
    ("MeetingTimes", "warnings"): 100,
    ("Event", "series"): 1,  # the event's series: a few; read in one batch
    ("Event", "occurrences"): expansion.MAX_ITEMS,
    ("Profile", "rsvp_summary"): dashboard.MAX_BUCKETS,
    ("CallerContext", "organizations"): 100,  # the caller's memberships: counted as 100
    ("CallerContext", "toolsets"): 50,  # the registry's tags
    ("FirstProfiles", "data"): 20,  # getContext: at most 20 profiles
    ("FirstCalendars", "data"): 100,  # and 100 calendars
}
"""`*Page.data` holds its connection's `limit`, counted there: 1 here."""
EXPANDS: dict[tuple[str, str], int] = {
    ("Event", "occurrences"): 1,  # each item is an occurrence
    ("Query", "event_occurrences"): 1,  # a page of them (docs/occurrences.md)
    ("Profile", "rsvp_summary"): dashboard.MAX_SUMMARY_RECURRING,  # each bucket, every event
}
"""Fields whose items are expanded: the occurrences each item may cost."""


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
        depth, cost, aliases, expands = _measure(node.selection_set, root,
                                                 self.context.schema, fragments, set())
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
            return
        if expands > MAX_EXPANSION:
            self.report_error(GraphQLError(
                f"Query may expand {expands} occurrences, more than the limit of "
                f"{MAX_EXPANSION} (`occurrences` counts 500 per event, `rsvp_summary` its "
                "buckets times the recurring events it may read). Ask for fewer events, or "
                "page.",
                node, extensions={"code": "query_too_costly", "cost": expands,
                                  "limit": MAX_EXPANSION},
            ))


def _measure(selection: SelectionSetNode | None, parent: GraphQLNamedType | None,
             schema: GraphQLSchema, fragments: dict[str, FragmentDefinitionNode],
             seen: set[str]) -> tuple[int, int, int, int]:
    """(depth, cost, aliases, occurrences it may expand) of a selection set on type
    `parent` (None where the document names no such type: validation reports that),
    fragments spread in place (a fragment spread twice counts its aliases twice)."""
    if selection is None:
        return 0, 0, 0, 0
    depth = cost = aliases = expands = 0
    for node in selection.selections:
        if isinstance(node, FieldNode):
            default, inner_type = _field(parent, node.name.value)
            inner_depth, inner_cost, inner_aliases, inner_expands = _measure(
                node.selection_set, inner_type, schema, fragments, seen)
            depth = max(depth, 1 + inner_depth)
            aliases += inner_aliases + (node.alias is not None)
            if node.selection_set is not None:
                times = _multiplier(node, default)
                per_item = _per_item(parent, node)
                # A list of computed occurrences is bounded by MAX_EXPANSION (and the
                # budget), not by MAX_COST: it reads no rows.
                cost += (1 if per_item else times) * (1 + inner_cost)
                expands += times * (per_item + inner_expands)
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
        inner_depth, inner_cost, inner_aliases, inner_expands = _measure(
            inner, on, schema, fragments, within)
        depth, cost = max(depth, inner_depth), cost + inner_cost
        aliases, expands = aliases + inner_aliases, expands + inner_expands
    return depth, cost, aliases, expands


def _field(parent: GraphQLNamedType | None, name: str) -> tuple[int, GraphQLNamedType | None]:
    """The default `limit` of field `name` of `parent` (its largest size, SIZES, for a
    list without one; 1 for any other field) and the named type it returns."""
    if not isinstance(parent, GraphQLObjectType) or name not in parent.fields:
        return 1, None
    definition = parent.fields[name]
    limit = definition.args.get("limit")
    default = limit.default_value if limit is not None else SIZES.get((parent.name, name), 1)
    return (default if isinstance(default, int) else 1), get_named_type(definition.type)


def _per_item(parent: GraphQLNamedType | None, node: FieldNode) -> int:
    """Occurrences each item of field `node` may expand: an occurrence is one; an
    RSVP summary's bucket, each recurring event the summary may read."""
    if parent is None:
        return 0
    return EXPANDS.get((parent.name, node.name.value), 0)


def _multiplier(node: FieldNode, default: int) -> int:
    """The most items field `node` may hold: its `limit`, else its largest size; an
    RSVP summary's literal `bucket` bounds its buckets (`day` or a variable: the most)."""
    for argument in node.arguments or ():
        if argument.name.value == "limit":
            if isinstance(argument.value, IntValueNode):
                return max(1, int(argument.value.value))
            return MAX_LIMIT
        if argument.name.value == "bucket" and isinstance(argument.value, StringValueNode):
            return min(default, dashboard.BUCKETS_AT_MOST.get(argument.value.value, default))
    return default


def extensions() -> list[Any]:
    return [lambda: AddValidationRules([QueryLimits])]


__all__ = ["MAX_ALIASES", "MAX_COST", "MAX_DEPTH", "MAX_EXPANSION", "SIZES", "QueryLimits",
           "extensions"]
