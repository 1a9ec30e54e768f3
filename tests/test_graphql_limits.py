"""Bounds on /graphql (graph/limits.py): depth, aliases and cost, with clear errors;
the registry's fixed documents (REST, MCP) are not subject to them."""

from __future__ import annotations

from typing import Any

import pytest
from gql import Client, gql
from gql.transport.aiohttp import AIOHTTPTransport
from gql.transport.exceptions import TransportQueryError
from graphql import get_introspection_query

from graph.limits import MAX_ALIASES, MAX_COST, MAX_DEPTH


def _client(live_server: Any, key: str) -> Client:
    transport = AIOHTTPTransport(url=live_server.url + "/graphql",
                                 headers={"Authorization": f"Bearer {key}"})
    return Client(transport=transport, fetch_schema_from_transport=False)


async def _refused(live_server: Any, user: Any, document: str) -> str:
    async with _client(live_server, user.api_key) as session:
        with pytest.raises(TransportQueryError) as raised:
            await session.execute(gql(document))
    errors = raised.value.errors or []
    assert errors and raised.value.data is None
    return str(errors[0]["message"])


async def test_forty_aliased_pages_are_refused(live_server: Any, user: Any) -> None:
    aliases = " ".join(f"a{i}: events(limit: 100) {{ data {{ id title }} }}" for i in range(40))
    message = await _refused(live_server, user, f"{{ {aliases} }}")
    assert str(MAX_ALIASES) in message and "alias" in message.lower()


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
