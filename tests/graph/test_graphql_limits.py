"""Bounds on /graphql (graph/limits.py): depth, aliases and cost, with clear errors;
the registry's fixed documents (REST, MCP) are not subject to them."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest
from gql import Client, gql
from gql.transport.aiohttp import AIOHTTPTransport
from gql.transport.exceptions import TransportQueryError
from graphql import get_introspection_query, graphql_sync

from graph.limits import MAX_ALIASES, MAX_COST, MAX_DEPTH
from graph.schema import schema


def _client(live_server: Any, key: str) -> Client:
    transport = AIOHTTPTransport(url=live_server.url + "/graphql",
                                 headers={"Authorization": f"Bearer {key}"})
    return Client(transport=transport, fetch_schema_from_transport=False)


async def _refusal(live_server: Any, user: Any, document: str) -> dict[str, Any]:
    async with _client(live_server, user.api_key) as session:
        with pytest.raises(TransportQueryError) as raised:
            await session.execute(gql(document))
    errors = raised.value.errors or []
    assert errors and raised.value.data is None
    return errors[0]  # type: ignore[no-any-return]


async def _refused(live_server: Any, user: Any, document: str) -> str:
    return str((await _refusal(live_server, user, document))["message"])


async def test_forty_aliased_pages_are_refused(live_server: Any, user: Any) -> None:
    aliases = " ".join(f"a{i}: events(limit: 100) {{ data {{ id title }} }}" for i in range(40))
    error = await _refusal(live_server, user, f"{{ {aliases} }}")
    assert str(MAX_ALIASES) in error["message"] and "alias" in error["message"].lower()
    # A code, as the depth and cost refusals have, with the count and the bound.
    assert error["extensions"] == {"code": "query_too_many_aliases", "aliases": 40,
                                   "limit": MAX_ALIASES}
    # Aliases in fragments count, once per spread.
    fields = " ".join(f"f{i}: id" for i in range(8))
    error = await _refusal(live_server, user, f"""
        {{ a: events(limit: 1) {{ data {{ ...E }} }} b: events(limit: 1) {{ data {{ ...E }} }} }}
        fragment E on Event {{ {fields} }}""")
    assert error["extensions"]["aliases"] == 18


async def test_cost_counts_list_limits(live_server: Any, user: Any) -> None:
    # Within the alias limit, yet 15 pages of 100 events with their profiles.
    aliases = " ".join(
        f"a{i}: events(limit: 100) {{ data {{ id profile {{ id }} }} }}" for i in range(15))
    message = await _refused(live_server, user, f"{{ {aliases} }}")
    assert f"exceeds the limit of {MAX_COST}" in message
    # Through a fragment and a variable limit (counted at the largest page) alike.
    spread = " ".join(f"a{i}: events(limit: $n) {{ ...Page }}" for i in range(12))
    message = await _refused(live_server, user, f"""
        query($n: Int!) {{ {spread} }}
        fragment Page on EventPage {{ data {{ id profile {{ id }} }} }}""".replace(
        "EventPage", await _page_type(live_server, user)))
    assert "Query cost" in message


async def _page_type(live_server: Any, user: Any) -> str:
    async with _client(live_server, user.api_key) as session:
        result = await session.execute(gql("{ events(limit: 1) { __typename } }"))
    return str(result["events"]["__typename"])


async def test_too_deep_is_refused(live_server: Any, user: Any) -> None:
    inner = "name"
    for _ in range(MAX_DEPTH + 1):
        inner = f"ofType {{ {inner} }}"
    message = await _refused(live_server, user, f'{{ __type(name: "Event") {{ {inner} }} }}')
    assert f"exceeds the limit of {MAX_DEPTH} nested fields" in message


async def test_ordinary_dashboard_queries_and_introspection_pass(live_server: Any,
                                                                 user: Any) -> None:
    async with _client(live_server, user.api_key) as session:
        result = await session.execute(gql("""{
            events(limit: 100) { data { id title profile { id display_name } } has_more }
            profiles(limit: 100) { data { id } }
            organizations { data { id } }
        }"""))
        assert "data" in result["events"]
        schema = await session.execute(gql(get_introspection_query()))
        assert schema["__schema"]["queryType"]["name"] == "Query"


async def test_registry_documents_are_not_limited(api: Any, user: Any) -> None:
    # Through REST, the fixed documents run as before, whatever their size.
    status, body, _ = await api.get("/v1/events", user, params={"limit": 100})
    assert status == 200, body
    status, body, _ = await api.get("/v1/agenda", user, params={"days": 31})
    assert status == 200, body


async def test_refused_documents_are_logged_as_the_clients_mistake(live_server: Any, user: Any,
                                                                   caplog: Any) -> None:
    """Syntax, validation, the limits and variable values: one line each at info, no
    error and no traceback; the client sees graphql-core's own message."""
    caplog.set_level(logging.INFO)
    aliases = " ".join(f"a{i}: events(limit: 1) {{ has_more }}" for i in range(MAX_ALIASES + 1))
    cases = [
        ("{ events(", {}),
        ("{ no_such_field }", {}),
        (f"{{ {aliases} }}", {}),
        ("query($n: Int!) { events(limit: $n) { has_more } }", {"n": "ten"}),
        ("query($p: ID!) { profile(profile_id: $p) { id } }", {}),
    ]
    async with aiohttp.ClientSession(headers=user.headers) as http:
        for document, variables in cases:
            async with http.post(live_server.url + "/graphql",
                                 json={"query": document, "variables": variables}) as response:
                answer = await response.json()
            [error] = answer["errors"]
            if "$" in document:  # refused before any resolver runs: graphql-core alone tells
                [expected] = graphql_sync(schema._schema, document,
                                          variable_values=variables).errors or []
                assert error["message"] == expected.message != "Unexpected error."
    refused = [r for r in caplog.records if r.name == "kalends.graphql"]
    assert [(r.levelno, r.getMessage(), r.exc_info) for r in refused] == [
        (logging.INFO, "graphql request refused", None)] * len(cases)
    assert refused[2].code == "query_too_many_aliases"  # type: ignore[attr-defined]
    assert all(r.request_id for r in refused)  # type: ignore[attr-defined]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
