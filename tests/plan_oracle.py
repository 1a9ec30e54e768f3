"""graphql-core as the oracle of every compiled plan the test suite runs.

`install()` (from conftest, before any app is built) makes each registry call run
twice: once by its compiled plan (graph/plan.py), for real, recording what each
resolver was called with and what it returned or raised; then by graphql-core's
`execute` on the same document and variables, with every resolver replaying
its recording instead of running again (a mutation must not happen twice, and
the replay makes no SQL). The two answers must be the same: data (key order
included), errors (message, path, locations, type of the original exception; in
either order, as concurrent siblings raise them, and when a failing non-null field
nulls the whole answer, either failing sibling's error, as whichever read answers
first is the one reported), and
the same resolvers called with the same arguments. A difference fails the
request (`AssertionError`, so a 500) and is kept in `MISMATCHES`, which an
autouse fixture checks after every test.

So every test that reaches a registered operation, through REST or MCP, is a
differential test of the plan on that path, error paths included. What replay
cannot see, the number of SQL statements, tests/graph/test_plan.py compares by
running both executors for real on read-only operations.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from graphql import ExecutionResult, GraphQLObjectType, GraphQLResolveInfo
from graphql.pyutils import is_awaitable

from graph.plan import Plan

MISMATCHES: list[str] = []
_UNFINISHED = object()
"""A resolver's awaitable that was cancelled before it finished."""
PLANNED = Plan.execute
"""The plan alone, without the oracle."""
SEEN: set[str] = set()
"""Names of the operations that ran under the oracle."""


@dataclass
class _Recording:
    calls: dict[tuple[Any, ...], tuple[dict[str, Any], Any, bool]] = field(default_factory=dict)
    replay: bool = False
    problems: list[str] = field(default_factory=list)


_ACTIVE: ContextVar[_Recording | None] = ContextVar("plan_oracle", default=None)


def _recording(resolve: Callable[..., Any]) -> Callable[..., Any]:
    def resolver(source: Any, info: GraphQLResolveInfo, **args: Any) -> Any:
        recording = _ACTIVE.get()
        if recording is None:
            return resolve(source, info, **args)
        key = tuple(info.path.as_list())
        if recording.replay:
            return _replay(recording, key, args)
        try:
            result = resolve(source, info, **args)
        except Exception as error:
            recording.calls[key] = (args, error, False)
            raise
        if not is_awaitable(result):
            recording.calls[key] = (args, result, False)
            return result
        # Until it finishes: a sibling's error may cancel it (gather_with_cancel)
        # before it ever runs, and graphql-core then cancels it too.
        recording.calls[key] = (args, _UNFINISHED, True)

        async def awaited() -> Any:
            try:
                value = await result
            except Exception as error:
                recording.calls[key] = (args, error, True)
                raise
            recording.calls[key] = (args, value, True)
            return value
        return awaited()
    return resolver


def _replay(recording: _Recording, key: tuple[Any, ...], args: dict[str, Any]) -> Any:
    if key not in recording.calls:
        recording.problems.append(f"graphql-core resolved {key}, the plan did not")
        raise AssertionError(f"no recorded resolver call at {key}")
    recorded_args, outcome, was_awaitable = recording.calls.pop(key)
    if recorded_args != args:
        recording.problems.append(f"arguments at {key}: plan {recorded_args!r}, core {args!r}")
    if not was_awaitable:
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def awaited() -> Any:
        if outcome is _UNFINISHED:
            # Cancelled in the plan's run: wait to be cancelled in this one as well.
            await asyncio.get_running_loop().create_future()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    return awaited()


def _summary(result: ExecutionResult) -> tuple[str, list[tuple[Any, ...]]]:
    data = json.dumps(result.data, default=repr)
    errors = [
        (e.message, e.path, [(loc.line, loc.column) for loc in e.locations or ()],
         type(e.original_error).__name__)
        for e in result.errors or ()
    ]
    return data, errors


def install(schema: Any) -> None:
    """Wrap the schema's resolvers and `Plan.execute`; idempotent."""
    if getattr(Plan.execute, "_oracle", False):
        return
    for gtype in schema.type_map.values():
        if not isinstance(gtype, GraphQLObjectType) or gtype.name.startswith("__"):
            continue
        for definition in gtype.fields.values():
            resolve = definition.resolve
            if resolve is not None and not getattr(resolve, "_is_default", False):
                definition.resolve = _recording(resolve)

    planned = Plan.execute

    async def checked(self: Plan, context: Any, raw_variables: dict[str, Any] | None
                      ) -> ExecutionResult:
        recording = _Recording()
        token = _ACTIVE.set(recording)
        try:
            result = await planned(self, context, raw_variables)
        finally:
            _ACTIVE.reset(token)
        recording.replay = True
        token = _ACTIVE.set(recording)
        try:
            expected = await self.execute_by_graphql_core(context, raw_variables)
        finally:
            _ACTIVE.reset(token)
        name = self.operation.name.value if self.operation.name else "?"
        SEEN.add(name)
        problems = list(recording.problems)
        if recording.calls:
            problems.append(f"the plan resolved {sorted(recording.calls)}, graphql-core did not")
        plan_summary, core_summary = _summary(result), _summary(expected)
        if plan_summary[0] != core_summary[0]:
            problems.append(f"data: plan {plan_summary[0]}\n  core {core_summary[0]}")
        # Sibling fields resolve concurrently, and graphql-core lists errors in the order
        # they are raised: which of two failing reads answers first is the database's
        # timing, in the plan and in graphql-core alike. The same errors, in any order.
        # When a non-null field fails, graphql-core (and the plan) cancels its siblings:
        # of two failing siblings, the one whose read answers first is the one reported,
        # and the whole answer is null either way.
        either_first = (result.data is None and expected.data is None
                        and len(plan_summary[1]) == len(core_summary[1]) == 1)
        if not either_first and \
                sorted(plan_summary[1], key=repr) != sorted(core_summary[1], key=repr):
            problems.append(f"errors: plan {plan_summary[1]}\n  core {core_summary[1]}")
        if problems:
            MISMATCHES.extend(f"{name} {raw_variables!r}: {p}" for p in problems)
            raise AssertionError(f"plan and graphql-core differ on {name}: {problems}")
        return result

    checked._oracle = True  # type: ignore[attr-defined]
    Plan.execute = checked  # type: ignore[method-assign]
