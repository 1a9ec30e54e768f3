"""Compiled plans (graph/plan.py) answer exactly what graphql-core answers.

Three layers:
- every registry call of the whole suite is replayed through graphql-core
  (tests/plan_oracle.py, installed by conftest); `test_a_tour_of_every_operation`
  makes sure that covers all registered operations, each at least once;
- for read-only operations, both executors run for real on the same data and
  must make the same number of SQL statements (dataloader batches included);
- a small schema with broken values reaches the error paths the product's
  resolvers never take: null propagation through lists, failing serializers,
  arguments, aliases, fragments, directives and serial mutations.
"""

from __future__ import annotations

import asyncio
import enum
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import plan_oracle
import pytest
import strawberry
from conftest import Api, LiveServer, new_event, new_profile
from graphql import ExecutionResult, parse, validate

from graph.plan import Plan, Unsupported, compile_operation
from registry import OPERATIONS

# ---------------------------------------------------------------------------
# The product's operations


async def _tour(api: Api, live_server: LiveServer) -> list[str]:
    """Every registered operation through REST; returns the GET paths it used."""
    owner, fan = live_server.create_user(), live_server.create_user()
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%d")

    async def ok(method: str, path: str, user: Any, expected: int, body: Any = None) -> Any:
        status, answer, _ = await api.request(method, path, user, json=body)
        assert status == expected, (method, path, answer)
        return answer

    profile = await new_profile(api, owner, description="Tour")
    pid = profile["id"]
    # Every change below is also rendered for this endpoint, inside its transaction.
    hook = await ok("POST", f"/v1/profiles/{pid}/webhook-endpoints", owner, 201, {
        "url": "https://tour.invalid/hook"})
    await ok("PATCH", f"/v1/webhook-endpoints/{hook['id']}", owner, 200, {"is_active": True})
    await ok("POST", f"/v1/webhook-endpoints/{hook['id']}/rotate-secret", owner, 200)
    await ok("PATCH", f"/v1/profiles/{pid}", owner, 200, {"display_name": "Tour profile"})
    event = await new_event(api, owner, profile, title="Tour concert",
                            recurrence_rule="FREQ=WEEKLY;COUNT=3")
    eid = event["id"]
    other = await ok("POST", "/v1/events", owner, 201, {
        "profile_id": pid, "title": "Tour talk", "start_time": "2031-06-01T18:00",
        "start_timezone": "Europe/Paris"})
    await ok("PATCH", f"/v1/events/{eid}", owner, 200, {"location": "Hall"})
    await ok("POST", f"/v1/events/{other['id']}/cancel", owner, 200, {"reason": "Ill"})
    await ok("POST", f"/v1/events/{other['id']}/reschedule", owner, 200, {
        "start_time": "2031-06-08T18:00", "start_timezone": "Europe/Paris"})
    await ok("PATCH", f"/v1/events/{eid}/rsvp-settings", owner, 200, {
        "enable_capacity_limit": True, "capacity_limit": 10})
    rsvp = await ok("POST", f"/v1/events/{eid}/rsvps", fan, 201, {
        "status": "going", "attendee_email": "fan@example.com"})
    await ok("PATCH", f"/v1/events/{eid}/rsvps/{rsvp['id']}", fan, 200, {"num_guests": 1})
    series = await ok("POST", f"/v1/profiles/{pid}/series", owner, 201, {
        "name": "Tour series", "slug": "tour-series"})
    sid = series["id"]
    await ok("PATCH", f"/v1/series/{sid}", owner, 200, {"description": "All of them"})
    await ok("POST", f"/v1/series/{sid}/events", owner, 204, {"event_id": eid})
    # One occurrence (docs/occurrences.md): the weekly concert's, 10:00 in Paris.
    second, third = (f"/v1/events/{eid}/occurrences/{eid}:{slot}"
                     for slot in ("20310513T080000Z", "20310520T080000Z"))
    await ok("PATCH", second, owner, 200, {"title": "Tour encore"})
    await ok("POST", f"{third}/cancel", owner, 200, {"reason": "Rain"})
    await ok("POST", f"{third}/restore", owner, 200)
    follow = await ok("POST", "/v1/follows", fan, 201, {
        "following_type": "profile", "target_id": pid})
    subscription = await ok("POST", "/v1/subscriptions", fan, 201, {
        "subscription_type": "profile", "profile_id": pid})
    await ok("PATCH", f"/v1/subscriptions/{subscription['id']}", fan, 200, {"is_active": True})
    calendar_path = f"/v1/calendars/{fan.calendar_id}/events"
    own = await ok("POST", calendar_path, fan, 201, {
        "title": "Dentist", "start_time": f"{tomorrow}T09:00", "start_timezone": "UTC",
        "end_time": f"{tomorrow}T10:00", "end_timezone": "UTC"})
    await ok("PATCH", f"{calendar_path}/{own['id']}", fan, 200, {"location": "Clinic"})
    await ok("POST", "/v1/meeting-times", fan, 200, {
        "start": f"{tomorrow}T00:00:00Z", "end": f"{tomorrow}T23:00:00Z", "duration_minutes": 30})

    gets = [
        "/v1/agenda?days=7", "/v1/calendars", f"/v1/calendars/{fan.calendar_id}",
        calendar_path, f"{calendar_path}/{own['id']}", "/v1/profiles?limit=5",
        f"/v1/profiles/{pid}", "/v1/events?limit=5",
        f"/v1/events/{eid}?expand=profile,series,rsvp_stats",
        f"/v1/events/{eid}?expand=rsvp_settings", f"/v1/profiles/{pid}/events",
        "/v1/external-calendars", "/v1/follows", f"/v1/profiles/{pid}/followers",
        "/v1/organizations", f"/v1/events/{eid}/rsvps", f"/v1/events/{eid}/rsvps/stats",
        f"/v1/events/{eid}/rsvp-settings", "/v1/search?q=tour", f"/v1/profiles/{pid}/series",
        "/v1/series", f"/v1/series/{sid}", f"/v1/series/{sid}/deletion-preview",
        f"/v1/series/{sid}/events", "/v1/subscriptions",
        f"/v1/subscriptions/{subscription['id']}",
        f"/v1/profiles/{pid}/webhook-endpoints", f"/v1/webhook-endpoints/{hook['id']}",
        f"/v1/free-busy?start={tomorrow}T00:00:00Z&end={tomorrow}T12:00:00Z", "/v1/context",
        f"/v1/events/{eid}/occurrences?from=2031-05-01T00:00:00Z&to=2031-06-01T00:00:00Z",
        second,
        # error paths
        "/v1/events/evt_doesnotexist0000000000000", "/v1/profiles/nonsense",
        "/v1/events?limit=0", "/v1/search?q=",
    ]
    for path in gets:
        user = fan if "calendar" in path or "subscription" in path or "follows" in path \
            or "agenda" in path else owner
        status, answer, _ = await api.get(path, user)
        assert (status == 200) == (gets.index(path) < len(gets) - 4), (path, status, answer)

    await ok("POST", f"/v1/events/{eid}/split", owner, 201, {
        "occurrence_id": f"{eid}:20310520T080000Z", "title": "Tour finale"})
    await ok("DELETE", f"/v1/series/{sid}/events/{eid}", owner, 204)
    await ok("DELETE", f"/v1/events/{eid}/rsvps/{rsvp['id']}", fan, 204)
    await ok("DELETE", f"/v1/follows/{follow['id']}", fan, 204)
    await ok("DELETE", f"/v1/subscriptions/{subscription['id']}", fan, 204)
    await ok("DELETE", f"{calendar_path}/{own['id']}", fan, 204)
    await ok("DELETE", f"/v1/series/{sid}", owner, 200)
    await ok("DELETE", f"/v1/events/{eid}", owner, 204)
    await ok("DELETE", f"/v1/webhook-endpoints/{hook['id']}", owner, 204)
    await ok("DELETE", f"/v1/profiles/{pid}", owner, 204)
    return gets


async def test_a_tour_of_every_operation(api: Api, live_server: LiveServer) -> None:
    plan_oracle.SEEN.clear()
    await _tour(api, live_server)
    assert set(OPERATIONS) - plan_oracle.SEEN == set()
    assert all(isinstance(op.plan, Plan) for op in OPERATIONS.values())


_core = Plan.execute_by_graphql_core


async def test_read_operations_make_the_same_sql_statements(
    api: Api, live_server: LiveServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner, fan = live_server.create_user(), live_server.create_user()
    profile = await new_profile(api, owner)
    events = [await new_event(api, owner, profile, title=f"Gig {i}") for i in range(6)]
    series = await api.post(f"/v1/profiles/{profile['id']}/series", owner,
                            json={"name": "Gigs", "slug": "gigs"})
    for event in events[:4]:
        await api.post(f"/v1/series/{series[1]['id']}/events", owner,
                       json={"event_id": event["id"]})
        await api.post(f"/v1/events/{event['id']}/rsvps", fan, json={"status": "going"})
    paths = [
        "/v1/events?limit=20", f"/v1/profiles/{profile['id']}/events",
        f"/v1/events/{events[0]['id']}?expand=profile,series,rsvp_stats",
        f"/v1/events/{events[5]['id']}?expand=series,rsvp_stats",
        f"/v1/series/{series[1]['id']}/events", "/v1/profiles?limit=10",
        "/v1/series", f"/v1/events/{events[0]['id']}/rsvps", "/v1/events/evt_missing",
        "/v1/events/evt_" + "0" * 32,
        "/v1/agenda?days=7", "/v1/search?q=gig", "/v1/follows",
    ]
    planned = plan_oracle.PLANNED

    async def measure(path: str) -> tuple[int, Any, int]:
        before = live_server.query_count
        status, body, _ = await api.get(path, owner)
        if status != 200:
            del body["error"]["request_id"]
        return status, body, live_server.query_count - before

    for path in paths:
        monkeypatch.setattr(Plan, "execute", planned)
        by_plan = await measure(path)
        monkeypatch.setattr(Plan, "execute", _core)
        by_core = await measure(path)
        assert by_plan[:2] == by_core[:2], path
        assert by_plan[2] == by_core[2], (path, by_plan[2], by_core[2])


# ---------------------------------------------------------------------------
# The algorithm on values the product never produces

_LOG: list[str] = []


@strawberry.enum
class Mood(enum.Enum):
    CALM = "calm"
    LOUD = "loud"


@strawberry.type
class Thing:
    name: str
    nick: str | None
    count: int
    flag: bool
    ident: strawberry.ID
    ratio: float | None
    when: datetime | None
    stamp: datetime
    mood: Mood
    partner: Thing | None = None
    twin: Thing = None  # type: ignore[assignment]  # set where a test selects it

    @strawberry.field
    async def later(self, fail: bool = False) -> str | None:
        if fail:
            raise ValueError(f"later failed on {self.name}")
        await asyncio.sleep(0)
        return f"later {self.name}"

    @strawberry.field
    async def must(self, fail: bool = False) -> str:
        if fail:
            raise ValueError(f"must failed on {self.name}")
        return f"must {self.name}"

    @strawberry.field
    def child(self) -> Thing | None:
        return _thing(f"{self.name}.child")

    @strawberry.field
    async def children(self) -> list[Thing | None]:
        return [_thing(f"{self.name}.{i}") for i in range(2)] + [None]

    @strawberry.field
    def strict_children(self) -> list[Thing]:
        return [_thing(f"{self.name}.s"), _broken()]


def _thing(name: str, **kw: Any) -> Thing:
    values: dict[str, Any] = {"name": name, "nick": None, "count": 1, "flag": True,
                              "ident": strawberry.ID(f"id-{name}"), "ratio": 0.5,
                              "when": datetime(2031, 1, 2, 3, 4, tzinfo=UTC),
                              "stamp": datetime(2031, 1, 2), "mood": Mood.CALM}
    values.update(kw)
    return Thing(**values)


def _broken() -> Thing:
    # Values a resolver should never hand back; graphql-core decides what they become.
    return _thing(None, nick=5, count="12", flag=1, ident=7, ratio=float("nan"),  # type: ignore[arg-type]
                  when="soon", stamp=ValueError("no stamp"), mood="sad")


@strawberry.type
class SampleQuery:
    @strawberry.field
    async def things(self) -> list[Thing]:
        return [_thing("a"), _thing("b", nick="bee", count=2**40)]

    @strawberry.field
    def maybe_things(self) -> list[Thing | None] | None:
        return [_thing("c"), _broken(), None]

    @strawberry.field
    def pairs(self) -> list[Thing | None]:
        fine = _thing("p1", partner=_thing("p1.partner"), twin=_thing("p1.twin"))
        broken_partner = _thing("p2", partner=_broken(), twin=_thing("p2.twin"))
        no_twin = _thing("p3", partner=ValueError("partner as an exception"))
        broken_twin = _thing("p4", twin=_broken())
        return [fine, broken_partner, no_twin, broken_twin]

    @strawberry.field
    def odd_things(self) -> list[Thing | None]:
        return [_thing("o"), ValueError("an exception as an item"), None]  # type: ignore[list-item]

    @strawberry.field
    def thing(self, name: str, broken: bool = False) -> Thing | None:
        return _broken() if broken else _thing(name)

    @strawberry.field
    def strict(self) -> Thing:
        return _broken()


@strawberry.type
class SampleMutation:
    @strawberry.mutation
    async def first(self, label: str) -> str:
        await asyncio.sleep(0.01)
        _LOG.append(f"first {label}")
        return label

    @strawberry.mutation
    def second(self, label: str) -> str:
        _LOG.append(f"second {label}")
        return label

    @strawberry.mutation
    async def failing(self) -> str:
        raise ValueError("failing mutation")


_SCHEMA = strawberry.Schema(
    query=SampleQuery, mutation=SampleMutation,
    config=strawberry.schema.config.StrawberryConfig(auto_camel_case=False),
)._schema

_DOCUMENTS: list[tuple[str, dict[str, Any]]] = [
    ("query Q { things { name nick count flag ident ratio } }", {}),
    ("query Q { maybe_things { name nick count flag ident ratio } }", {}),
    ("query Q { maybe_things { nick count } }", {}),
    ("query Q { maybe_things { when mood } }", {}),
    ("query Q { odd_things { name } }", {}),
    ("query Q { pairs { name partner { name nick } } }", {}),
    ("query Q { pairs { name twin { name } } }", {}),
    ("query Q { pairs { twin { nick partner { count } } partner { twin { mood } } } }", {}),
    ("query Q { maybe_things { when stamp } }", {}),
    ("query Q { things { name when stamp mood } }", {}),
    ("query Q { strict { nick } }", {}),
    ("query Q { strict { name } }", {}),
    ("query Q($n: String!) { thing(name: $n) { name alias: nick later must } }", {"n": "x"}),
    ("query Q { thing(name: \"y\") { later(fail: true) must } }", {}),
    ("query Q { thing(name: \"y\") { later must(fail: true) } other: thing(name: \"z\") { name } }",
     {}),
    ("query Q { thing(name: \"y\", broken: true) { nick flag child { name } } }", {}),
    ("query Q { things { name children { name later must } } }", {}),
    ("query Q { things { name strict_children { name } } }", {}),
    ("query Q { things { strict_children { nick later } } }", {}),
    ("query Q { thing(name: \"f\") { ...F child { ...F ... on Thing { count } } } }"
     " fragment F on Thing { name nick __typename name }", {}),
    ("query Q($a: Boolean!, $b: Boolean = true) { things { name @include(if: $a)"
     " nick @skip(if: $b) ... @include(if: $b) { count } ...F @include(if: $a) } }"
     " fragment F on Thing { flag later }", {"a": True}),
    ("query Q($a: Boolean!, $b: Boolean = true) { things { name @include(if: $a)"
     " nick @skip(if: $b) ... @include(if: $b) { count } ...F @include(if: $a) } }"
     " fragment F on Thing { flag later }", {"a": False, "b": False}),
    ("query Q($n: String!) { thing(name: $n) { name } }", {}),
    ("query Q($n: String!) { thing(name: $n) { name } }", {"n": 3}),
    ("query Q($n: String = \"dflt\") { thing(name: $n) { name } }", {}),
    ("query Q($n: String = \"dflt\") { thing(name: $n) { name } }", {"n": None}),
    ("query Q($b: Boolean = true) { things { name @include(if: $b) } }", {"b": None}),
    ("query Q($b: Boolean = true) { things { child @include(if: $b) { name } } }", {"b": None}),
    ("mutation M { a: first(label: \"1\") b: second(label: \"2\") c: first(label: \"3\") }", {}),
    ("mutation M { a: first(label: \"1\") failing b: second(label: \"2\") }", {}),
]


def _outcome(result: ExecutionResult) -> tuple[str, list[Any]]:
    return (json.dumps(result.data, default=repr),
            [(e.message, e.path, e.locations, type(e.original_error).__name__)
             for e in result.errors or ()])


@pytest.mark.parametrize(("source", "variables"), _DOCUMENTS)
async def test_plans_agree_with_graphql_core(source: str, variables: dict[str, Any]) -> None:
    document = parse(source)
    assert validate(_SCHEMA, document) == []
    plan = compile_operation(_SCHEMA, document)
    _LOG.clear()
    by_plan = await plan_oracle.PLANNED(plan, None, variables)
    plan_log = list(_LOG)
    _LOG.clear()
    by_core = await _core(plan, None, variables)
    assert _outcome(by_plan) == _outcome(by_core)
    assert plan_log == _LOG  # mutations run one after the other, in order


@strawberry.interface
class Named:
    name: str


@strawberry.type
class Person(Named):
    age: int


@strawberry.type
class AbstractQuery:
    @strawberry.field
    def named(self) -> Named:
        return Person(name="a", age=1)


def test_what_plans_do_not_run_fails_at_compile_time() -> None:
    schema = strawberry.Schema(query=AbstractQuery, types=[Person])._schema
    with pytest.raises(Unsupported, match="abstract type Named"):
        compile_operation(schema, parse("query Q { named { name } }"))


@pytest.mark.parametrize("seed", range(5))
def test_an_indexed_text_locates_as_graphql_core_does(seed: int) -> None:
    """graph.plan.Text answers every position as graphql-core's own Source, line
    breaks of all three kinds included."""
    import random

    from graphql.language import Source

    from graph.plan import Text

    pick = random.Random(seed)
    body = "".join(pick.choice(["a", " ", "{", "\n", "\r", "\r\n", "é"]) for _ in range(300))
    ours, theirs = Text(body), Source(body)
    assert [ours.get_location(p) for p in range(len(body) + 2)] == \
        [theirs.get_location(p) for p in range(len(body) + 2)]
