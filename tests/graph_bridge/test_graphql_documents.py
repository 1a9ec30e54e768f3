"""`POST /graphql` through kept, compiled documents (docs/graphql.md, "Dashboards: `/graphql`").

Every answer must be what graphql-core gives: the documents dashboards send,
and documents generated over the schema, are answered by the endpoint and by
Strawberry's own `schema.execute` (graphql-core's executor, with the same
validation rules and error masking) on the same data, and compared byte for
byte. Beneath that, tests/plan_oracle.py replays each plan through graphql-core.
Then: Apollo's automatic persisted queries, the refusals of malformed requests,
and the cache's bounds (documents past them freed, and the memory each holds).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import itertools
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import plan_oracle
import psutil
import pytest
from conftest import Api, LiveServer, User, assert_error, new_event, new_profile
from graphql.execution.values import VariableValues
from hypothesis import HealthCheck, given, settings
from hypothesis_graphql import queries

from domain.auth import authenticate_key
from graph import documents as documents_module
from graph.context import Context
from graph.documents import Documents
from graph.plan import Plan
from graph.schema import schema, sdl
from graph_bridge.http import DOCUMENTS
from web.services import SERVICES

# ---------------------------------------------------------------------------
# The oracle


async def _by_graphql_core(live_server: LiveServer, user: User, body: dict[str, Any]) -> bytes:
    """The answer of graphql-core's executor (through Strawberry, as /graphql ran
    before plans), serialized as the endpoint serializes."""
    services = live_server.app[SERVICES]
    caller = await authenticate_key(services.db, f"Bearer {user.api_key}")
    context = Context(services, caller.claimed(), "req_oracle")
    result = await schema.execute(body["query"], body.get("variables"), context,
                                  operation_name=body.get("operationName"))
    formatted: dict[str, Any] = {"data": result.data}
    if result.errors:
        formatted["errors"] = [error.formatted for error in result.errors]
    return orjson.dumps(formatted)


async def _post(live_server: LiveServer, user: User | None, body: Any
                ) -> tuple[int, bytes]:
    headers = user.headers if user else {}
    async with aiohttp.ClientSession(headers=headers) as http, \
            http.post(live_server.url + "/graphql", json=body) as response:
        return response.status, await response.read()


async def _same_as_graphql_core(live_server: LiveServer, user: User, body: dict[str, Any]
                                ) -> dict[str, Any]:
    status, answer = await _post(live_server, user, body)
    assert status == 200, answer
    expected = live_server.call(_by_graphql_core(live_server, user, body))
    assert answer == expected, body
    return orjson.loads(answer)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
async def world(live_server: LiveServer) -> dict[str, Any]:
    """An owner's profile with events (one recurring, one cancelled), RSVPs, a
    series; a fan who follows and subscribes."""
    owner, fan = live_server.create_user(), live_server.create_user()
    async with aiohttp.ClientSession() as session:
        api = Api(session, live_server.url)
        profile = await new_profile(api, owner, display_name="Dashboard profile")
        weekly = await new_event(api, owner, profile, title="Weekly practice",
                                 recurrence_rule="FREQ=WEEKLY;COUNT=5")
        talk = await new_event(api, owner, profile, title="Talk",
                               start_time="2031-06-01T18:00", start_timezone="America/New_York")
        status, _, _ = await api.post(f"/v1/events/{talk['id']}/cancel", owner,
                                      json={"reason": "Ill"})
        assert status == 200
        for user, state in ((fan, "going"), (owner, "maybe")):
            status, body, _ = await api.post(f"/v1/events/{weekly['id']}/rsvps", user, json={
                "status": state, "attendee_email": user.email})
            assert status == 201, body
        status, series, _ = await api.post(f"/v1/profiles/{profile['id']}/series", owner,
                                           json={"name": "Practice", "slug": "practice"})
        assert status == 201, series
        await api.post(f"/v1/series/{series['id']}/events", owner,
                       json={"event_id": weekly["id"]})
        await api.post("/v1/follows", fan, json={"following_type": "profile",
                                                  "target_id": profile["id"]})
        await api.post("/v1/subscriptions", fan, json={"subscription_type": "profile",
                                                        "profile_id": profile["id"]})
    return {"owner": owner, "fan": fan, "profile": profile["id"], "weekly": weekly["id"],
            "talk": talk["id"], "series": series["id"]}


# What dashboards ask: pages with what they join, one event with its counts, the
# agenda, search; fragments, aliases, variables, directives; and the error paths
# (a missing resource beside data, bad variables, refused documents).
_DASHBOARD = [
    ("""query Events($n: Int!) { events(limit: $n) { data { id title start_time status
        profile { id display_name } rsvp_stats { going maybe total_attendees } }
        has_more next_cursor } }""", {"n": 20}, "owner"),
    ("""query One($id: ID!) { event(event_id: $id) { ...E series { id name }
        rsvp_settings { enable_capacity_limit capacity_limit } } }
        fragment E on Event { id title recurrence_rule start_timezone is_all_day transparency }""",
     {"id": "weekly"}, "owner"),
    ("""query Stats($id: ID!, $full: Boolean!) { event_rsvp_stats(event_id: $id) { going
        maybe @include(if: $full) waitlist @skip(if: $full) } }""",
     {"id": "weekly", "full": True}, "owner"),
    ("""query Stats($id: ID!, $full: Boolean!) { event_rsvp_stats(event_id: $id) { going
        maybe @include(if: $full) waitlist @skip(if: $full) } }""",
     {"id": "weekly", "full": False}, "owner"),
    ("""{ agenda(days: 31, timezone: "Europe/Paris") { window { start end timezone }
        items { title start_time end_time } complete incomplete_reason
        sources { type } warnings { code } } }""", {}, "fan"),
    ("""{ a: profile_events(profile_id: "PROFILE", limit: 5) { data { id title } }
        b: profile_events(profile_id: "PROFILE", limit: 1) { data { title } has_more }
        missing: event(event_id: "evt_00000000000000000000000000000000") { id } }""",
     {}, "owner"),
    ("""{ organizations { data { id role is_default } } follows { data { id } }
        subscriptions { data { id is_active } } calendars { data { id name } } }""",
     {}, "fan"),
    ("""query Search($q: String!) { search(q: $q, limit: 5) { data { type } has_more } }""",
     {"q": "practice"}, "owner"),
    ("""query Page($id: ID!, $after: String) { event_rsvps(event_id: $id, cursor: $after)
        { data { id status } has_more } }""", {"id": "weekly", "after": "nonsense"}, "owner"),
    ("""query Bad($n: Int!) { events(limit: $n) { has_more } }""", {"n": "ten"}, "owner"),
    ("""query Bad($n: Int!) { events(limit: $n) { has_more } }""", {}, "owner"),
    ("""{ events(limit: 5) { data { nope } } }""", {}, "owner"),
    ("""{ series(series_id: "SERIES") { id name events_count } }""", {}, "fan"),
    ("""{ __schema { queryType { name } mutationType { fields { name } } } }""", {}, "owner"),
    ("""{ __type(name: "Event") { name fields { name type { kind name ofType { name } } } } }""",
     {}, "owner"),
]


def _substituted(world: dict[str, Any], value: Any) -> Any:
    if isinstance(value, str):
        for name in ("weekly", "talk"):
            if value == name:
                return world[name]
        return value.replace("PROFILE", world["profile"]).replace("SERIES", world["series"])
    if isinstance(value, dict):
        return {k: _substituted(world, v) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("query", "variables", "who"), _DASHBOARD)
async def test_dashboard_documents_answer_as_graphql_core(
        live_server: LiveServer, world: dict[str, Any], query: str, variables: dict[str, Any],
        who: str) -> None:
    body = {"query": _substituted(world, query), "variables": _substituted(world, variables)}
    # The first request parses and validates, graphql-core runs it; the second compiles
    # a plan and runs it; the third runs what was kept.
    first = await _same_as_graphql_core(live_server, world[who], body)
    for _ in range(2):
        assert await _same_as_graphql_core(live_server, world[who], body) == first


async def test_documents_are_compiled_once_and_kept(live_server: LiveServer, user: User,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[str] = []
    compile_operation = documents_module.compile_operation

    def counting(*args: Any) -> Any:
        compiled.append("x")
        return compile_operation(*args)

    monkeypatch.setattr(documents_module, "compile_operation", counting)
    query = "query Kept { organizations { data { id } } }"
    for _ in range(5):
        status, _ = await _post(live_server, user, {"query": query})
        assert status == 200
    assert compiled == ["x"]
    # Two operations, each compiled once when first named; graphql-core's own errors
    # when the request names none or one the document lacks.
    two = "query A { organizations { has_more } } query B { calendars { has_more } }"
    for name in ("A", "B", "A", "B"):
        data = orjson.loads((await _post(live_server, user, {"query": two,
                                                             "operationName": name}))[1])
        assert list(data["data"]) == ["organizations" if name == "A" else "calendars"]
    assert compiled == ["x"] * 3
    for name, message in ((None, "Must provide operation name if query contains multiple "
                                 "operations."),
                          ("C", "Unknown operation named 'C'.")):
        body = {"query": two, "operationName": name}
        answer = orjson.loads((await _post(live_server, user, body))[1])
        assert answer == {"data": None, "errors": [{"message": message}]}


async def test_subscriptions_are_not_run_over_post(live_server: LiveServer,
                                                   world: dict[str, Any]) -> None:
    query = "subscription S($p: ID!) { event_changes(profile_id: $p) { type } }"
    status, answer = await _post(live_server, world["owner"], {
        "query": query, "variables": {"p": world["profile"]}})
    assert status == 200
    assert orjson.loads(answer) == {"data": None, "errors": [{
        "message": "Subscriptions are served over WebSocket at /graphql (graphql-transport-ws).",
        "locations": [{"line": 1, "column": 1}]}]}


# ---------------------------------------------------------------------------
# Generated documents


_READS = ["organizations", "profiles", "events", "calendars", "subscriptions", "follows",
          "agenda", "search", "series_list", "external_calendars", "event", "profile",
          "profile_events", "event_rsvp_stats"]


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(query=queries(sdl(), fields=_READS))
def test_generated_documents_answer_as_graphql_core(live_server: LiveServer,
                                                     world: dict[str, Any], query: str) -> None:
    owner = world["owner"]
    body = {"query": query}
    expected = live_server.call(_by_graphql_core(live_server, owner, body))
    for _ in range(2):  # by graphql-core, then by the plan compiled for the second request
        status, answer = live_server.call(_post(live_server, owner, body))
        assert (status, answer) == (200, expected), query


# ---------------------------------------------------------------------------
# Automatic persisted queries (Apollo's protocol)


def _apq(sha256: str) -> dict[str, Any]:
    return {"persistedQuery": {"version": 1, "sha256Hash": sha256}}


async def test_persisted_queries_as_apollo_client_sends_them(live_server: LiveServer,
                                                             user: User) -> None:
    query = "query Orgs { organizations { data { id } } }  # apq " + user.consumer
    sha256 = hashlib.sha256(query.encode()).hexdigest()
    # Apollo Client first sends the hash alone; unknown, it is told so...
    status, answer = await _post(live_server, user, {
        "operationName": "Orgs", "variables": {}, "extensions": _apq(sha256)})
    assert status == 200
    assert orjson.loads(answer) == {"data": None, "errors": [{
        "message": "PersistedQueryNotFound",
        "extensions": {"code": "PERSISTED_QUERY_NOT_FOUND"}}]}
    # ...and sends it again with the document, which is kept under its hash.
    with_query = {"query": query, "operationName": "Orgs", "extensions": _apq(sha256)}
    status, answer = await _post(live_server, user, with_query)
    expected = {"data": {"organizations": {"data": [{"id": user.organization_id}]}}}
    assert (status, orjson.loads(answer)) == (200, expected)
    # From then on, the hash alone, for any key (the document is no secret).
    other = live_server.create_user()
    status, answer = await _post(live_server, other, {"extensions": _apq(sha256)})
    assert orjson.loads(answer) == {
        "data": {"organizations": {"data": [{"id": other.organization_id}]}}}
    # A document sent without the protocol is kept under its hash as well.
    plain = "{ calendars { has_more } } # plain " + user.consumer
    await _post(live_server, user, {"query": plain})
    status, answer = await _post(live_server, user, {
        "extensions": _apq(hashlib.sha256(plain.encode()).hexdigest())})
    assert orjson.loads(answer) == {"data": {"calendars": {"has_more": False}}}


async def test_persisted_query_refusals(live_server: LiveServer, user: User) -> None:
    query = "{ organizations { has_more } }"
    wrong = hashlib.sha256(b"something else").hexdigest()
    cases = [
        ({"query": query, "extensions": _apq(wrong)}, "extensions.persistedQuery.sha256Hash"),
        ({"extensions": {"persistedQuery": {"version": 2, "sha256Hash": wrong}}},
         "extensions.persistedQuery.version"),
        ({"extensions": {"persistedQuery": {"version": 1, "sha256Hash": "ABC"}}},
         "extensions.persistedQuery.sha256Hash"),
        ({"extensions": {"persistedQuery": "yes"}}, "extensions.persistedQuery"),
    ]
    before = len(live_server.app[DOCUMENTS])
    for body, param in cases:
        status, answer = await _post(live_server, user, body)
        assert_error(status, orjson.loads(answer), 400, "invalid_field", param)
    # A hash that does not match its document stores nothing.
    status, answer = await _post(live_server, user, {"extensions": _apq(wrong)})
    assert orjson.loads(answer)["errors"][0]["extensions"] == {
        "code": "PERSISTED_QUERY_NOT_FOUND"}
    assert len(live_server.app[DOCUMENTS]) == before


# ---------------------------------------------------------------------------
# Malformed requests: the error envelope (docs/http.md, "Errors"), each with its param


async def test_malformed_requests_get_the_envelope(api: Api, user: User) -> None:
    cases: list[tuple[dict[str, Any], int, str, str | None]] = [
        ({"json": {}}, 400, "missing_field", "query"),
        ({"json": {"query": None}}, 400, "missing_field", "query"),
        ({"json": {"query": 5}}, 400, "invalid_field", "query"),
        ({"json": {"query": "{ organizations { has_more } }", "variables": [1]}}, 400,
         "invalid_field", "variables"),
        ({"json": {"query": "{ organizations { has_more } }", "operationName": 3}}, 400,
         "invalid_field", "operationName"),
        ({"json": [{"query": "{ organizations { has_more } }"}]}, 400, "invalid_json", None),
        ({"data": b"not json", "headers": {"Content-Type": "application/json"}}, 400,
         "invalid_json", None),
        ({"data": b'{"query": "{ organizations { has_more } }"}',
          "headers": {"Content-Type": "text/plain"}}, 415, "unsupported_media_type", None),
    ]
    for request, status, code, param in cases:
        got, body, _ = await api.post("/graphql", user, **request)
        assert_error(got, body, status, code, param)
    # Keys a client adds of its own are ignored.
    status, body, _ = await api.post("/graphql", user, json={
        "query": "{ organizations { has_more } }", "id": "x", "documentId": "y"})
    assert (status, body) == (200, {"data": {"organizations": {"has_more": False}}})


# ---------------------------------------------------------------------------
# Bounds


_REPRESENTATIVE = [query for query, _, _ in _DASHBOARD] + [
    " ".join(f"a{i}: events(limit: 5) {{ data {{ id title profile {{ id }} }} }}"
             for i in range(12)).join("{}"),
]


@pytest.mark.slow
def test_weight_covers_what_a_document_holds() -> None:
    """Each entry's weight, which the byte bound adds up, is at least the memory
    its tree, validation and plans take once every form is compiled (tracemalloc),
    and not many times more."""
    # Measured in a fresh interpreter: tracemalloc counts every thread's
    # allocations, and a server another test left running allocates meanwhile. It finds
    # this module in its folder, the helpers in tests/, and the packages at the root
    # (without the root, tests/'s folders named after them would shadow them).
    here = Path(__file__).resolve().parent
    path = os.pathsep.join([str(here.parents[1]), str(here.parent)])
    measured = subprocess.run(
        [sys.executable, "-c", f"import {__name__} as m; m._print_weights()"],
        cwd=here, env={**os.environ, "PYTHONPATH": path}, capture_output=True, check=True,
        timeout=300)
    for text, held, weight in orjson.loads(measured.stdout):
        assert held <= weight <= 4 * held, (text[:60], held, weight)


def _print_weights() -> None:
    cache = Documents(schema._schema)
    weights = []
    for number, text in enumerate(_REPRESENTATIVE):
        text = f"{text} # {number}"  # never seen: nothing cached in graphql-core
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            document = cache.get(text)
            if not document.refused:
                operation = document.operation(None)
                assert operation is not None
                assert document.plan(schema._schema, operation) is None  # first: graphql-core
                plan = document.plan(schema._schema, operation)
                assert plan is not None
                for values in itertools.product((True, False),
                                                repeat=len(plan.directive_variables)):
                    plan.compiled(VariableValues({}, dict(zip(plan.directive_variables, values,
                                                              strict=True))))
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        weights.append((text, held, document.weight))
    sys.stdout.buffer.write(orjson.dumps(weights))


@pytest.mark.slow
async def test_distinct_documents_past_the_bounds_do_not_grow_the_process(
        live_server: LiveServer, user: User, monkeypatch: pytest.MonkeyPatch) -> None:
    """The served cache, its bounds a tenth of the defaults (100 entries, 6.4 MB: the
    byte bound binds first, at ~70 of these documents, as 64 MB does at ~700),
    flooded with 2,000 documents past them: what is evicted is freed. Unbounded, the same
    flood grows the process ~20 MB; bounded, ~3 MB in a fresh process. (It took 10,000
    documents to show the same against the default bounds: ~90 MB unbounded, 40 allowed.)"""
    # The plans alone: graphql-core's replay of each would double the time, and every
    # other test of this module compares them.
    monkeypatch.setattr(Plan, "execute", plan_oracle.PLANNED)
    cache = live_server.app[DOCUMENTS]
    monkeypatch.setattr(cache, "max_entries", documents_module.MAX_ENTRIES // 10)
    monkeypatch.setattr(cache, "max_bytes", documents_module.MAX_BYTES // 10)
    process = psutil.Process()

    async def flood(first: int, count: int) -> None:
        # A consumer each: its requests fit in one's quota (6,000 a minute).
        flooder = await asyncio.to_thread(live_server.create_user)
        async with aiohttp.ClientSession(headers=flooder.headers) as http:
            for i in range(first, first + count):
                # Distinct texts, each valid: kept, and a quarter of them compiled.
                query = f"query Q{i} {{ o{i}: organizations {{ data {{ id role }} }} }}"
                for _ in range(1 + (i % 4 == 0)):  # a second request compiles a plan
                    async with http.post(live_server.url + "/graphql",
                                         json={"query": query}) as response:
                        assert response.status == 200
                        assert "errors" not in await response.json()

    # The cache full and the process warm, four clients at a time as below.
    await asyncio.gather(*(flood(50 * k, 50) for k in range(4)))
    gc.collect()
    rss = process.memory_info().rss
    await asyncio.gather(*(flood(200 + 500 * k, 500) for k in range(4)))
    gc.collect()
    grown = process.memory_info().rss - rss
    assert len(cache) <= cache.max_entries
    assert cache.bytes <= cache.max_bytes
    # Unbounded, these 2,000 documents (500 of them compiled) grow the process ~20 MB.
    assert grown < 8 * 1024 * 1024, grown


@pytest.mark.slow
def test_a_byte_bound_evicts_large_documents_first_in_first_out() -> None:
    cache = Documents(schema._schema, max_entries=100, max_bytes=8 * 1024 * 1024)
    big = [f"query Big{i} {{ organizations {{ has_more }} }} #{'x' * 4000}" for i in range(20)]
    for text in big:
        cache.get(text)
    assert cache.bytes <= cache.max_bytes
    assert 0 < len(cache) < 20
    kept = [text for text in big if cache.by_hash(hashlib.sha256(text.encode()).hexdigest())]
    assert kept == big[-len(kept):]
    # A single document larger than the whole bound is answered and never kept.
    cache.get("{ organizations { has_more } } #" + "y" * 8 * 1024 * 1024)
    assert cache.bytes <= cache.max_bytes
