"""Execution plans: the registry's fixed documents compiled once into Python.

graphql-core's executor is generic: for every field of every object it collects
the selection, builds a `Path` and a `GraphQLResolveInfo`, calls a resolver and
walks `complete_value` down the field's type. A 100-event page has ~2,400
fields, and that walk cost most of a REST request. The registry's documents
never change, so each one is compiled, per combination of the variables its
`@include`/`@skip` directives read, into one Python function per selection set.
A leaf read from an attribute (Strawberry's basic fields) becomes a line of
that function: read the attribute, check null, pass `str`/`bool`/in-range `int`
through as graphql-core would, else call the scalar's own serializer.
Everything else (resolvers, lists, nested objects, awaitables, errors and null
propagation) follows graphql-core's algorithm step for step, with the same
resolver objects and argument coercion (`get_argument_values`); variables are
coerced by graphql-core's own functions with each signature and default worked
out once (`get_variable_values` itself on any error). So a plan answers what
`graphql.execute` answers: the test suite replays every registry call through
both (tests/plan_oracle.py), and tests/graph/test_plan.py covers the rest.

What a plan does not support (abstract types, `is_type_of`, `@defer`/`@stream`,
fragment variables, middleware) makes `compile_operation` raise, so a document
that needs graphql-core's generality fails at start-up instead of being served
differently; directive arguments that fail for a request's values (`@include(if:
null)`) send that request to graphql-core. `/graphql` keeps graphql-core
(through Strawberry) for arbitrary queries.
"""

from __future__ import annotations

import asyncio
import re
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from graphql import (
    DirectiveNode,
    DocumentNode,
    ExecutionResult,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    VariableNode,
    execute,
    is_leaf_type,
    located_error,
)
from graphql.execution.collect_fields import (
    FieldDetailsList,
    FragmentDetails,
    collect_fields,
    collect_subfields,
)
from graphql.execution.executor import default_field_resolver
from graphql.execution.get_variable_signature import (
    GraphQLVariableSignature,
    get_variable_signature,
)
from graphql.execution.values import (
    VariableValues,
    VariableValueSource,
    get_argument_values,
    get_variable_values,
    input_is_nested_too_deeply,
    maybe_use_default_value,
)
from graphql.language import Source, SourceLocation, Visitor, visit
from graphql.pyutils import Path, Undefined, gather_with_cancel, inspect, is_awaitable, is_iterable
from graphql.type.scalars import serialize_boolean, serialize_id, serialize_int, serialize_string
from graphql.utilities.coerce_input_value import coerce_input_value

# Values of these exact classes come out of these serializers unchanged.
_PASS_THROUGH: dict[Callable[[Any], Any], str] = {
    serialize_string: "str", serialize_id: "str", serialize_boolean: "bool",
}
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
MAX_FORMS = 16
"""Compiled forms kept per plan (one per combination of `@include`/`@skip` values)."""

Complete = Callable[["_Execution", "_Field", Any, Path], Any]


class Unsupported(Exception):
    """The document needs a feature that plans leave to graphql-core."""


class _Execution:
    """The state of one execution: what resolvers see and the errors so far."""

    __slots__ = ("_arguments", "context", "errors", "nulled", "plan", "variables")

    def __init__(self, plan: Plan, variables: VariableValues, context: Any) -> None:
        self.plan = plan
        self.variables = variables
        self.context = context
        self.errors: list[GraphQLError] = []
        self.nulled: set[Path | None] = set()
        self._arguments: dict[int, dict[str, Any]] = {}

    def arguments(self, f: _Field) -> dict[str, Any]:
        """Field `f`'s argument values, coerced once per execution: a field inside a
        list (an event's `occurrences` under a page of 100) has the same ones for
        every item, since they come from the document and its variables alone."""
        found = self._arguments.get(id(f))
        if found is None:
            found = self._arguments[id(f)] = get_argument_values(
                f.definition, f.nodes[0], self.variables)
        return found

    def add_error(self, error: GraphQLError, path: Path | None) -> None:
        # As graphql-core's CollectedErrors: nothing under a position already nulled.
        nulled = self.nulled
        at = path
        while at is not None:
            if at in nulled:
                return
            at = at.prev
        if None in nulled:
            return
        nulled.add(path)
        self.errors.append(error)


@dataclass(eq=False)
class _Field:
    """One response key of a selection set, compiled."""

    key: str
    parent: GraphQLObjectType
    definition: GraphQLField
    details: FieldDetailsList
    nodes: list[FieldNode]
    attr: str | None
    """Set for Strawberry's basic fields: the resolver is `getattr(source, attr)`."""
    resolve: Callable[..., Any]
    has_args: bool
    complete: Complete = field(init=False)
    selection: str | None = None
    """For a field of an object type (not a list): its selection function's name."""

    @property
    def name(self) -> str:
        return self.nodes[0].name.value


def _strawberry_attr(definition: GraphQLField) -> str | None:
    if not getattr(definition.resolve, "_is_default", False):
        return None
    strawberry_field = (definition.extensions or {}).get("strawberry-definition")
    return None if strawberry_field is None else str(strawberry_field.python_name)



class Text(Source):
    """A document's text with its line breaks found once: an error's location is a
    binary search instead of a scan of the text from its start (graphql-core's
    `Source.get_location`), which a document whose 500 fields fail at once (an
    exhausted expansion budget) paid 500 times on the event loop. Same answers:
    tests/graph/test_plan.py compares them."""

    def __init__(self, body: str) -> None:
        super().__init__(body)
        breaks = list(_NEWLINE.finditer(body))
        self._starts = [m.start() for m in breaks]
        self._ends = [m.end() for m in breaks]

    def get_location(self, position: int) -> SourceLocation:
        before = bisect_left(self._starts, position)  # line breaks before `position`
        line_start = self._ends[before - 1] if before else 0
        return SourceLocation(before + 1, position + 1 - line_start)


_NEWLINE = re.compile(r"\r\n|[\n\r]")
"""graphql-core's own line break (graphql/language/location.py)."""

# ---------------------------------------------------------------------------
# Running a field, as graphql-core's Executor.execute_field and its helpers


def _handle_field_error(ex: _Execution, raw: Exception, return_type: GraphQLOutputType,
                        nodes: list[FieldNode], path: Path) -> None:
    error = located_error(raw, nodes, path.as_list())
    if isinstance(return_type, GraphQLNonNull):
        raise error
    ex.add_error(error, path)


def _run_field(ex: _Execution, f: _Field, source: Any, parent_path: Path | None) -> Any:
    path = Path(parent_path, f.key, f.parent.name)
    try:
        if f.attr is not None:
            result = getattr(source, f.attr)
        else:
            info = GraphQLResolveInfo(
                f.name, f.nodes, f.definition.type, f.parent, path, ex.plan.schema,
                ex.plan.fragment_definitions, None, ex.plan.operation, ex.variables,
                ex.context, is_awaitable, None, None,  # type: ignore[arg-type]
            )
            args = ex.arguments(f) if f.has_args else {}
            result = f.resolve(source, info, **args)
        if is_awaitable(result):
            return _complete_awaitable(ex, f, result, path)
        completed = f.complete(ex, f, result, path)
        if is_awaitable(completed):
            return _await_completed(ex, f, completed, path)
        return completed
    except Exception as raw:
        _handle_field_error(ex, raw, f.definition.type, f.nodes, path)
        return None


async def _complete_awaitable(ex: _Execution, f: _Field, result: Awaitable[Any], path: Path
                              ) -> Any:
    try:
        completed = f.complete(ex, f, await result, path)
        if is_awaitable(completed):
            completed = await completed
    except Exception as raw:
        _handle_field_error(ex, raw, f.definition.type, f.nodes, path)
        return None
    return completed


async def _await_completed(ex: _Execution, f: _Field, completed: Awaitable[Any], path: Path
                           ) -> Any:
    try:
        return await completed
    except Exception as raw:
        _handle_field_error(ex, raw, f.definition.type, f.nodes, path)
        return None


def _leaf_null(ex: _Execution, f: _Field, parent_path: Path | None) -> None:
    """A basic non-null leaf read None: the error graphql-core raises there."""
    path = Path(parent_path, f.key, f.parent.name)
    raw = TypeError(f"Cannot return null for non-nullable field {f.parent.name}.{f.name}.")
    _handle_field_error(ex, raw, f.definition.type, f.nodes, path)


_PLAIN: set[type] = set()
"""Classes whose instances are plain values: not Undefined, an exception or awaitable."""


def _plain(value: Any) -> bool:
    """Whether `value` is completed as it is (graphql-core checks each of these per
    value; a plan once per class, as awaitability is a property of the class)."""
    if value is None or value is Undefined or isinstance(value, Exception) \
            or is_awaitable(value):
        return False
    _PLAIN.add(value.__class__)
    return True


def _object_error(ex: _Execution, f: _Field, raw: Exception, path: Path) -> None:
    _handle_field_error(ex, raw, f.definition.type, f.nodes, path)
    return None


def _leaf_coerce(ex: _Execution, f: _Field, value: Any, parent_path: Path | None) -> Any:
    """A basic leaf's value that is not passed through: graphql-core's slow path."""
    try:
        return f.complete(ex, f, value, None)  # type: ignore[arg-type]  # leaves ignore the path
    except Exception as raw:
        path = Path(parent_path, f.key, f.parent.name)
        _handle_field_error(ex, raw, f.definition.type, f.nodes, path)
        return None


def _settle(awaitables: Iterable[Any]) -> None:
    """Let awaitables that will not be awaited finish, as graphql-core does."""
    for awaitable in awaitables:
        task = asyncio.ensure_future(awaitable)
        task.add_done_callback(_consume)


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def _gather_fields(results: dict[str, Any], pending: list[str]) -> dict[str, Any]:
    if len(pending) == 1:
        key = pending[0]
        results[key] = await results[key]
    else:
        values = await gather_with_cancel(*(results[key] for key in pending))
        results.update(zip(pending, values, strict=True))
    return results


# ---------------------------------------------------------------------------
# Completers: graphql-core's complete_value, specialised by type at compile time


def _non_null(inner: Complete) -> Complete:
    def complete(ex: _Execution, f: _Field, value: Any, path: Path) -> Any:
        if isinstance(value, Exception):
            raise value
        completed = inner(ex, f, value, path)
        if completed is None:
            raise TypeError(
                f"Cannot return null for non-nullable field {f.parent.name}.{f.name}."
            )
        return completed
    return complete


def _nullable(inner: Complete) -> Complete:
    def complete(ex: _Execution, f: _Field, value: Any, path: Path) -> Any:
        if isinstance(value, Exception):
            raise value
        if value is None or value is Undefined:
            return None
        return inner(ex, f, value, path)
    return complete


def _leaf(gtype: Any) -> Complete:
    coerce = gtype.coerce_output_value

    def complete(ex: _Execution, f: _Field, value: Any, path: Path) -> Any:
        coerced = coerce(value)
        if coerced is Undefined or coerced is None:
            raise TypeError(
                f"Expected `{inspect(gtype)}.coerce_output_value({inspect(value)})`"
                f" to return non-nullable value, returned: {inspect(coerced)}"
            )
        return coerced
    return complete


Run = Callable[["_Execution", Any, "Path | None"], Any]


def _list(item_type: GraphQLOutputType, item: Complete, direct: Run | None) -> Complete:
    """`direct`, for a list of objects: an item that is an object (not null, an
    exception or an awaitable) goes straight to its selection function, which is
    all that `item` would do with it (an object's completion is never null)."""
    def complete(ex: _Execution, f: _Field, value: Any, path: Path) -> Any:
        if not is_iterable(value):
            raise GraphQLError(
                "Expected Iterable, but did not find one for field"
                f" '{f.parent.name}.{f.name}'."
            )
        results: list[Any] = []
        pending: list[int] = []
        try:
            for index, value_item in enumerate(value):
                item_path = Path(path, index, None)
                try:
                    if direct is not None and (
                            value_item.__class__ in _PLAIN or _plain(value_item)):
                        completed = direct(ex, value_item, item_path)
                        waits = completed.__class__ is not dict  # a selection's pending fields
                    elif is_awaitable(value_item):
                        results.append(
                            _awaitable_item(ex, f, item_type, item, value_item, item_path))
                        pending.append(index)
                        continue
                    else:
                        completed = item(ex, f, value_item, item_path)
                        waits = is_awaitable(completed)
                    if waits:
                        results.append(_await_item(ex, f, item_type, completed, item_path))
                        pending.append(index)
                    else:
                        results.append(completed)
                except Exception as raw:
                    _handle_field_error(ex, raw, item_type, f.nodes, item_path)
                    results.append(None)
        except Exception:
            _settle(results[i] for i in pending)
            raise
        if not pending:
            return results
        return _gather_items(results, pending)
    return complete


async def _awaitable_item(ex: _Execution, f: _Field, item_type: GraphQLOutputType,
                          item: Complete, value: Awaitable[Any], path: Path) -> Any:
    try:
        completed = item(ex, f, await value, path)
        if is_awaitable(completed):
            completed = await completed
    except Exception as raw:
        _handle_field_error(ex, raw, item_type, f.nodes, path)
        return None
    return completed


async def _await_item(ex: _Execution, f: _Field, item_type: GraphQLOutputType,
                      completed: Awaitable[Any], path: Path) -> Any:
    try:
        return await completed
    except Exception as raw:
        _handle_field_error(ex, raw, item_type, f.nodes, path)
        return None


async def _gather_items(results: list[Any], pending: list[int]) -> list[Any]:
    if len(pending) == 1:
        index = pending[0]
        results[index] = await results[index]
    else:
        values = await gather_with_cancel(*(results[i] for i in pending))
        for index, value in zip(pending, values, strict=True):
            results[index] = value
    return results


def _object(run: Run) -> Complete:
    def complete(ex: _Execution, f: _Field, value: Any, path: Path) -> Any:
        return run(ex, value, path)
    return complete


# ---------------------------------------------------------------------------
# Compilation


@dataclass
class Plan:
    """One registry document, compiled lazily per `@include`/`@skip` variable values."""

    schema: GraphQLSchema
    document: DocumentNode
    operation: OperationDefinitionNode
    fragment_definitions: dict[str, FragmentDefinitionNode]
    fragments: dict[str, FragmentDetails]
    directive_variables: tuple[str, ...]
    signatures: list[tuple[GraphQLVariableSignature, Any]]
    """Each variable's signature and coerced default (`_signatures`), or _UNSIGNED."""
    _compiled: dict[tuple[Any, ...], Callable[[_Execution], Any]] = field(
        default_factory=dict, repr=False)

    def _coerce(self, inputs: dict[str, Any]) -> VariableValues | list[GraphQLError]:
        """graphql-core's `get_variable_values`, with each variable's signature and
        coerced default worked out once per document instead of per request. Any
        value that does not coerce takes graphql-core's own path, for its errors."""
        if self.signatures is _UNSIGNED:
            return _core_variables(self, inputs)
        sources: dict[str, VariableValueSource] = {}
        coerced: dict[str, Any] = {}
        for signature, default in self.signatures:
            name = signature.name
            value = inputs.get(name, Undefined)
            if value is Undefined:
                if default is _REQUIRED:
                    return _core_variables(self, inputs)
                sources[name] = VariableValueSource(signature)
                if default is not Undefined:
                    coerced[name] = default
                continue
            sources[name] = VariableValueSource(signature, value)
            if input_is_nested_too_deeply(value, signature.type):
                return _core_variables(self, inputs)
            value = coerce_input_value(value, signature.type)
            if value is Undefined:
                return _core_variables(self, inputs)
            coerced[name] = value
        return VariableValues(sources, coerced)

    def compiled(self, variables: VariableValues) -> Callable[[_Execution], Any]:
        key = tuple(variables.coerced.get(name) for name in self.directive_variables)
        run = self._compiled.get(key)
        if run is None:
            run = _Compiler(self, variables).root()
            # A document with n directive variables has up to 2**n forms: keep the
            # first few, compile any other per request rather than grow without end.
            if len(self._compiled) < MAX_FORMS:
                self._compiled[key] = run
        return run

    async def execute_by_graphql_core(self, context: Any,
                                      raw_variables: dict[str, Any] | None) -> ExecutionResult:
        """The same document through graphql-core's generic executor (the oracle)."""
        result = execute(self.schema, self.document, context_value=context,
                         variable_values=raw_variables)
        if is_awaitable(result):
            result = await result
        assert isinstance(result, ExecutionResult)
        return result

    async def execute(self, context: Any, raw_variables: dict[str, Any] | None
                      ) -> ExecutionResult:
        """What `graphql.execute` answers for this document, these variables."""
        variables = self._coerce(raw_variables or {})
        if isinstance(variables, list):
            return ExecutionResult(None, variables)
        try:
            run = self.compiled(variables)
        except GraphQLError:
            # Directives that reject these values (`@include(if: null)`): graphql-core
            # reports that where it meets it, field by field; let it.
            return await self.execute_by_graphql_core(context, raw_variables)
        ex = _Execution(self, variables, context)
        try:
            data = run(ex)
            if is_awaitable(data):
                data = await data
        except GraphQLError as error:
            ex.add_error(error, None)
            data = None
        return ExecutionResult(data, ex.errors or None)


_REQUIRED = object()
"""A non-null variable without a default: missing is an error."""
_UNSIGNED: list[tuple[GraphQLVariableSignature, Any]] = []
"""A document whose signatures or defaults need graphql-core's errors every time."""


def _signatures(schema: GraphQLSchema, operation: OperationDefinitionNode
                ) -> list[tuple[GraphQLVariableSignature, Any]]:
    """Each variable's signature and what it is when not sent: its coerced default,
    Undefined (left out), or _REQUIRED."""
    out: list[tuple[GraphQLVariableSignature, Any]] = []
    for node in operation.variable_definitions or ():
        signature = get_variable_signature(schema, node)
        if isinstance(signature, GraphQLError):
            return _UNSIGNED
        if node.default_value:
            defaults: dict[str, Any] = {}
            failed: list[GraphQLError] = []
            maybe_use_default_value(defaults, signature.name, signature,
                                    partial(_collect, failed))
            if failed:
                return _UNSIGNED
            out.append((signature, defaults.get(signature.name, Undefined)))
        elif isinstance(signature.type, GraphQLNonNull):
            out.append((signature, _REQUIRED))
        else:
            out.append((signature, Undefined))
    return out


def _collect(errors: list[GraphQLError], error: GraphQLError, _path: list[str | int]) -> None:
    errors.append(error)


def _core_variables(plan: Plan, inputs: dict[str, Any]) -> VariableValues | list[GraphQLError]:
    return get_variable_values(
        plan.schema, plan.operation.variable_definitions or (), inputs, max_errors=50)


def compile_operation(schema: GraphQLSchema, document: DocumentNode) -> Plan:
    """A plan for a validated document holding one operation; compiles its default form."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    fragment_definitions = {
        d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
    }
    if len(operations) != 1:
        raise Unsupported("a plan runs a document with exactly one operation")
    operation = operations[0]
    if any(d.variable_definitions for d in fragment_definitions.values()):
        raise Unsupported("fragment variables")
    plan = Plan(
        schema, document, operation, fragment_definitions,
        {name: FragmentDetails(d, None) for name, d in fragment_definitions.items()},
        directive_variables(document), _signatures(schema, operation),
    )
    # Compile the form without variables now: an unsupported document fails at start-up.
    defaults = get_variable_values(schema, operation.variable_definitions or (), {})
    if not isinstance(defaults, list):
        plan.compiled(defaults)
    return plan


def directive_variables(document: DocumentNode) -> tuple[str, ...]:
    names: list[str] = []

    class _Collect(Visitor):
        def enter_directive(self, node: DirectiveNode, *_: Any) -> None:
            for argument in node.arguments or ():
                if isinstance(argument.value, VariableNode):
                    names.append(argument.value.name.value)

    visit(document, _Collect())
    return tuple(sorted(set(names)))


class _Compiler:
    def __init__(self, plan: Plan, variables: VariableValues) -> None:
        self.plan = plan
        self.variables = variables
        self.namespace: dict[str, Any] = {
            "_run_field": _run_field, "_leaf_null": _leaf_null, "_leaf_coerce": _leaf_coerce,
            "_is_awaitable": is_awaitable, "_gather_fields": _gather_fields,
            "_settle": _settle, "_INT_MIN": _INT_MIN, "_INT_MAX": _INT_MAX,
            "_Undefined": Undefined, "_Path": Path, "_object_error": _object_error,
            "_PLAIN": _PLAIN, "_plain": _plain,
            "_await_completed": _await_completed,
        }
        self.sources: list[str] = []
        self._last_selection = ""

    def root(self) -> Callable[[_Execution], Any]:
        plan = self.plan
        root_type = plan.schema.get_root_type(plan.operation.operation)
        if root_type is None:
            raise Unsupported(f"no {plan.operation.operation.value} root type")
        collected = collect_fields(
            plan.schema, plan.fragments, self.variables, root_type, plan.operation)
        if collected.new_defer_usages:
            raise Unsupported("@defer")
        fields = self._fields(root_type, collected.grouped_field_set)
        serial = plan.operation.operation == OperationType.MUTATION
        name = self._selection_function(fields, serial=serial)
        self._exec()
        run = self.namespace[name]

        def root(ex: _Execution) -> Any:
            return run(ex, None, None)
        return root

    def _exec(self) -> None:
        exec(compile("\n".join(self.sources), f"<plan {self.plan.operation.name}>", "exec"),
             self.namespace)

    def _fields(self, parent: GraphQLObjectType, grouped: dict[str, FieldDetailsList]
                ) -> list[_Field]:
        out: list[_Field] = []
        for key, details in grouped.items():
            if any(d.fragment_variable_values is not None for d in details):
                raise Unsupported("fragment variables")
            nodes = [d.node for d in details]
            definition = self.plan.schema.get_field(parent, nodes[0].name.value)
            if definition is None:
                continue  # graphql-core leaves unknown fields out
            f = _Field(
                key=key, parent=parent, definition=definition, details=details, nodes=nodes,
                attr=_strawberry_attr(definition),
                resolve=definition.resolve or default_field_resolver,
                has_args=bool(definition.args or nodes[0].arguments),
            )
            f.complete = self._completer(definition.type, f)
            out.append(f)
        return out

    def _completer(self, gtype: GraphQLOutputType, f: _Field) -> Complete:
        # As complete_value: a non-null type completes its inner type, null checks included.
        if isinstance(gtype, GraphQLNonNull):
            return _non_null(_nullable(self._inner(gtype.of_type, f)))
        return _nullable(self._inner(gtype, f))

    def _inner(self, gtype: GraphQLOutputType, f: _Field) -> Complete:
        if isinstance(gtype, GraphQLList):
            item_type = gtype.of_type
            named = item_type.of_type if isinstance(item_type, GraphQLNonNull) else item_type
            if not isinstance(named, GraphQLObjectType):
                return _list(item_type, self._completer(item_type, f), None)
            run = self._object_run(named, f)
            inner = _nullable(_object(run))
            item = _non_null(inner) if isinstance(item_type, GraphQLNonNull) else inner
            return _list(item_type, item, run)
        if is_leaf_type(gtype):
            return _leaf(gtype)
        if isinstance(gtype, GraphQLObjectType):
            run = self._object_run(gtype, f)
            f.selection = self._last_selection
            return _object(run)
        raise Unsupported(f"abstract type {gtype}")

    def _object_run(self, gtype: GraphQLObjectType, f: _Field) -> Run:
        if gtype.is_type_of is not None:
            raise Unsupported(f"is_type_of on {gtype.name}")
        collected = collect_subfields(
            self.plan.schema, self.plan.fragments, self.variables, self.plan.operation,
            gtype, f.details)
        if collected.new_defer_usages:
            raise Unsupported("@defer")
        fields = self._fields(gtype, collected.grouped_field_set)
        name = self._last_selection = self._selection_function(fields, serial=False)
        namespace = self.namespace

        def run(ex: _Execution, source: Any, path: Path | None) -> Any:
            return namespace[name](ex, source, path)
        return run

    def _selection_function(self, fields: list[_Field], *, serial: bool) -> str:
        """Generate the function completing one selection set on a source object."""
        index = len(self.sources)
        name = f"_selection_{index}"
        self.sources.append("")  # reserve the slot: nested selections append after
        lines = [f"{'async ' if serial else ''}def {name}(ex, source, path):",
                 "    results = {}"]
        if not serial:
            lines += ["    pending = []", "    try:"]
        for number, f in enumerate(fields):
            ref = f"_f{index}_{number}"
            self.namespace[ref] = f
            body = self._serial_field(f, ref) if serial else self._field_lines(f, ref)
            lines += [("        " if not serial else "    ") + line for line in body]
        if serial:
            lines.append("    return results")
        else:
            lines += [
                "    except Exception:",
                "        if pending:",
                "            _settle(results[key] for key in pending)",
                "        raise",
                "    if pending:",
                "        return _gather_fields(results, pending)",
                "    return results",
            ]
        self.sources[index] = "\n".join(lines)
        return name

    @staticmethod
    def _serial_field(f: _Field, ref: str) -> list[str]:
        key = repr(f.key)
        return [f"value = _run_field(ex, {ref}, source, path)",
                "if _is_awaitable(value):",
                "    value = await value",
                f"results[{key}] = value"]

    @staticmethod
    def _object_lines(f: _Field, ref: str, key: str, non_null: bool) -> list[str]:
        """An object read from an attribute: its selection function, directly; the
        generic path for anything but an object (null aside)."""
        on_null = (f"_leaf_null(ex, {ref}, path)" if non_null else "pass")
        return [
            f"value = source.{f.attr}",
            "if value is None:",
            f"    {on_null}",
            "elif value.__class__ in _PLAIN or _plain(value):",
            f"    field_path = _Path(path, {key}, {f.parent.name!r})",
            "    try:",
            f"        value = {f.selection}(ex, value, field_path)",
            "    except Exception as raw:",
            f"        value = _object_error(ex, {ref}, raw, field_path)",
            "    else:",
            "        if value.__class__ is not dict:  # a selection's pending fields",
            f"            value = _await_completed(ex, {ref}, value, field_path)",
            f"            pending.append({key})",
            "else:",
            f"    value = _run_field(ex, {ref}, source, path)",
            "    if _is_awaitable(value):",
            f"        pending.append({key})",
            f"results[{key}] = value",
        ]

    def _field_lines(self, f: _Field, ref: str) -> list[str]:
        key = repr(f.key)
        gtype = f.definition.type
        non_null = isinstance(gtype, GraphQLNonNull)
        named = gtype.of_type if isinstance(gtype, GraphQLNonNull) else gtype
        if f.attr is not None and f.attr.isidentifier() and f.selection is not None:
            return self._object_lines(f, ref, key, non_null)
        if f.attr is None or not f.attr.isidentifier() or not is_leaf_type(named):
            return [f"value = _run_field(ex, {ref}, source, path)",
                    f"results[{key}] = value",
                    "if _is_awaitable(value):",
                    f"    pending.append({key})"]
        coerce = named.coerce_output_value
        kind = _PASS_THROUGH.get(coerce)
        on_null = (f"_leaf_null(ex, {ref}, path)" if non_null else "pass")
        lines = [f"value = source.{f.attr}", "if value is None:", f"    {on_null}"]
        if kind is not None or coerce is serialize_int:
            keep = (f"value.__class__ is {kind}" if kind is not None
                    else "value.__class__ is int and _INT_MIN <= value <= _INT_MAX")
            lines += [f"elif not ({keep}):",
                      f"    value = _leaf_coerce(ex, {ref}, value, path)"]
        else:
            # Any other scalar or enum: its serializer, directly; graphql-core's exact
            # path (_leaf_coerce) only for an exception value, a failure or no value.
            self.namespace[f"{ref}_coerce"] = coerce
            lines += ["elif isinstance(value, Exception):",
                      f"    value = _leaf_coerce(ex, {ref}, value, path)",
                      "else:",
                      "    try:",
                      f"        coerced = {ref}_coerce(value)",
                      "    except Exception:",
                      "        coerced = None",
                      "    if coerced is None or coerced is _Undefined:",
                      f"        coerced = _leaf_coerce(ex, {ref}, value, path)",
                      "    value = coerced"]
        return [*lines, f"results[{key}] = value"]
