"""The internal GraphQL endpoint, exercised with `gql` as dashboards would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gql import Client, gql
from gql.transport.aiohttp import AIOHTTPTransport
from gql.transport.exceptions import TransportQueryError, TransportServerError

from graph.schema import sdl

ROOT = Path(__file__).resolve().parents[2]


def test_committed_schema_matches_the_code() -> None:
    committed = (ROOT / "schema.graphql").read_text()
    assert committed == sdl(), (
        "schema.graphql is stale: regenerate it with `python -m graph.schema > schema.graphql`"
    )


def test_an_event_made_from_its_row_sets_every_plain_field() -> None:
    """Event.from_row fills the instance directly (no keyword __init__): a field
    added to the type without being read from the row would fail every event read."""
    from graph.types import _EVENT_COLUMNS, Event

    plain = {f.python_name for f in Event.__strawberry_definition__.fields
             if f.base_resolver is None}
    assert plain == {*_EVENT_COLUMNS, "profile_id", "row"}


def _client(live_server: Any, key: str | None) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    transport = AIOHTTPTransport(url=live_server.url + "/graphql", headers=headers)
    return Client(transport=transport, fetch_schema_from_transport=False)


def _request(document: str, variables: dict[str, Any]) -> Any:
    request = gql(document)
    request.variable_values = variables
    return request


async def test_query_and_mutation_round_trip(live_server: Any, user: Any) -> None:
    async with _client(live_server, user.api_key) as session:
        created = await session.execute(
            _request("""mutation($input: ProfileCreateInput!) {
                create_profile(input: $input) { id platform_id is_private organization_id }
            }""", {"input": {"platform_id": f"gql-{user.consumer}",
                                       "display_name": "Via GraphQL"}}),
        )
        profile = created["create_profile"]
        assert profile["id"].startswith("prf_")
        assert profile["organization_id"] == user.organization_id
        assert profile["is_private"] is False

        result = await session.execute(
            _request("""query($id: ID!) {
                profile(profile_id: $id) { id display_name created_at }
                organizations { data { id role is_default } has_more next_cursor }
            }""", {"id": profile["id"]}),
        )
    assert result["profile"]["display_name"] == "Via GraphQL"
    assert result["profile"]["created_at"].endswith("Z")
    assert result["organizations"] == {
        "data": [{"id": user.organization_id, "role": "owner", "is_default": True}],
        "has_more": False, "next_cursor": None,
    }


async def test_errors_carry_the_api_error_code(live_server: Any, user: Any) -> None:
    async with _client(live_server, user.api_key) as session:
        with pytest.raises(TransportQueryError) as info:
            await session.execute(
                _request("query($id: ID!) { profile(profile_id: $id) { id } }", {"id": "prf_" + "0" * 32}),
            )
    error = info.value.errors[0]  # type: ignore[index]
    assert error["extensions"] == {
        "type": "not_found_error", "code": "resource_not_found", "param": "profile_id",
    }


async def test_mutation_input_follows_the_same_rules_as_rest(live_server: Any, user: Any) -> None:
    async with _client(live_server, user.api_key) as session:
        with pytest.raises(TransportQueryError) as info:
            await session.execute(
                _request("""mutation($input: ProfileCreateInput!) {
                    create_profile(input: $input) { id } }""", {"input": {"platform_id": "no", "display_name": "x"}}),
            )
    error = info.value.errors[0]  # type: ignore[index]
    assert error["extensions"]["code"] == "invalid_field"
    assert error["extensions"]["param"] == "platform_id"


async def test_requires_an_api_key(live_server: Any) -> None:
    async with _client(live_server, "kal_not-a-real-key") as session:
        with pytest.raises(TransportServerError) as info:
            await session.execute(gql("{ organizations { has_more } }"))
    assert info.value.code == 401


async def test_ide_for_browsers_and_queries_over_get(api: Any, user: Any) -> None:
    # A browser gets GraphiQL (tests/graph_bridge/test_graphiql.py); any other GET runs a query
    # (tests/graph_bridge/test_graphql_get.py).
    async with api._session.get(api.base + "/graphql", headers={"Accept": "text/html"}) as page:
        assert page.status == 200
        assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    status, body, _ = await api.get("/graphql?query=%7B__typename%7D", user)
    assert (status, body) == (200, {"data": {"__typename": "Query"}})
