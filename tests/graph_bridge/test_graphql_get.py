"""`GET /graphql` running queries (docs/graphql.md, "Dashboards: `/graphql`"): GraphQL over HTTP's
GET, and Apollo's GET for hashed queries (`useGETForHashedQueries`). The same request as
POST's body in the query string, run the same way (key, rate limit, document
cache, persisted queries, errors), queries only (`405` for anything else, which
never runs), every answer marked `Vary: Authorization`."""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest
from conftest import Api, LiveServer, User, assert_error, handle, new_profile, own_server

from domain.config import Rate, Settings

PROFILE = """query Profile($id: ID!) {
  profile(profile_id: $id) { id display_name organization_id }
  organizations { data { id role } has_more }
}"""
CREATE = """mutation Create($input: ProfileCreateInput!) {
  create_profile(input: $input) { id }
}"""


def fresh(document: str) -> str:
    """The document under a text (and so a hash) no earlier test sent: the
    document cache is the process's."""
    return f"# {secrets.token_hex(8)}\n{document}"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def persisted(text: str) -> dict[str, Any]:
    return {"persistedQuery": {"version": 1, "sha256Hash": sha256(text)}}


def parameters(query: str | None = None, variables: dict[str, Any] | None = None,
               operation_name: str | None = None, extensions: dict[str, Any] | None = None
               ) -> dict[str, str]:
    """The query string of a GET, as GraphQL clients write it."""
    found = {"query": query, "operationName": operation_name,
             "variables": None if variables is None else orjson.dumps(variables).decode(),
             "extensions": None if extensions is None else orjson.dumps(extensions).decode()}
    return {name: value for name, value in found.items() if value is not None}


def body(query: str | None = None, variables: dict[str, Any] | None = None,
         operation_name: str | None = None, extensions: dict[str, Any] | None = None
         ) -> dict[str, Any]:
    """The same request as POST's body."""
    found = {"query": query, "variables": variables, "operationName": operation_name,
             "extensions": extensions}
    return {name: value for name, value in found.items() if value is not None}


async def over_get(api: Api, user: User | None, **request: Any) -> tuple[int, Any, Any]:
    status, answer, headers = await api.get("/graphql", user, params=parameters(**request))
    assert headers["Vary"] == "Authorization", (status, answer)
    return status, answer, headers


async def over_post(api: Api, user: User | None, **request: Any) -> tuple[int, Any, Any]:
    return await api.post("/graphql", user, json=body(**request))


def without_request_id(answer: Any) -> Any:
    return {"error": {k: v for k, v in answer["error"].items() if k != "request_id"}}


# ---------------------------------------------------------------------------
# Queries


async def test_a_query_answers_as_over_post(api: Api, user: User) -> None:
    profile = await new_profile(api, user, display_name="Over GET")
    request = {"query": PROFILE, "variables": {"id": profile["id"]}, "operation_name": "Profile"}
    status, answer, headers = await over_get(api, user, **request)
    assert status == 200, answer
    assert headers["Content-Type"] == "application/json"
    assert answer == {"data": {
        "profile": {"id": profile["id"], "display_name": "Over GET",
                    "organization_id": user.organization_id},
        "organizations": {"data": [{"id": user.organization_id, "role": "owner"}],
                          "has_more": False},
    }}
    assert (await over_post(api, user, **request))[:2] == (200, answer)
    # Errors too, as POST shapes them: the API's error code in extensions.
    missing = {**request, "variables": {"id": "prf_" + "0" * 32}}
    status, answer, _ = await over_get(api, user, **missing)
    assert status == 200 and answer["data"] is None, answer
    assert answer["errors"][0]["extensions"]["code"] == "resource_not_found"
    assert (await over_post(api, user, **missing))[:2] == (status, answer)
    # A refused document: graphql-core's validation error, as over POST.
    wrong = {"query": "{ profile { nope } }"}
    status, answer, _ = await over_get(api, user, **wrong)
    assert status == 200 and answer["data"] is None, answer
    assert "Cannot query field 'nope'" in answer["errors"][0]["message"], answer
    assert (await over_post(api, user, **wrong))[:2] == (status, answer)


async def test_the_operation_a_document_names_is_the_one_checked(api: Api, user: User) -> None:
    both = fresh(f"query Mine {{ organizations {{ has_more }} }}\n{CREATE}")
    variables = {"input": {"platform_id": handle(), "display_name": "Never"}}
    status, answer, _ = await over_get(api, user, query=both, variables=variables,
                                       operation_name="Mine")
    assert (status, answer) == (200, {"data": {"organizations": {"has_more": False}}})
    status, answer, headers = await over_get(api, user, query=both, variables=variables,
                                             operation_name="Create")
    assert_error(status, answer, 405, "method_not_allowed", param="query")
    assert headers["Allow"] == "POST"
    # No operation picked: nothing runs, and graphql-core says why, as over POST.
    status, answer, _ = await over_get(api, user, query=both, variables=variables)
    assert status == 200 and answer["data"] is None, answer
    assert "operation name" in answer["errors"][0]["message"], answer
    assert (await over_post(api, user, query=both, variables=variables))[:2] == (status, answer)
    await _never_created(api, user, variables["input"]["platform_id"])


# ---------------------------------------------------------------------------
# Mutations and subscriptions


async def _never_created(api: Api, user: User, platform_id: str) -> None:
    status, listed, _ = await api.get("/v1/profiles", user, params={"limit": "100"})
    assert status == 200, listed
    assert platform_id not in [p["platform_id"] for p in listed["data"]], listed
    # Still free: no profile holds the handle.
    profile = await new_profile(api, user, platform_id=platform_id)
    assert profile["platform_id"] == platform_id


async def test_a_mutation_is_405_and_changes_nothing(api: Api, make_user: Any) -> None:
    user = await make_user()
    platform_id = handle()
    variables = {"input": {"platform_id": platform_id, "display_name": "Never"}}
    status, answer, headers = await over_get(api, user, query=CREATE, variables=variables)
    error = assert_error(status, answer, 405, "method_not_allowed", param="query")
    assert "mutation with POST" in error["message"], error
    assert headers["Allow"] == "POST"
    await _never_created(api, user, platform_id)


async def test_a_persisted_mutation_is_405_over_get_too(api: Api, make_user: Any) -> None:
    user = await make_user()
    text = fresh(CREATE)
    first = {"input": {"platform_id": handle(), "display_name": "Once"}}
    # Registered (and run) over POST, as Apollo's link does for a mutation.
    status, answer, _ = await over_post(api, user, query=text, variables=first,
                                        extensions=persisted(text))
    assert status == 200 and answer["data"]["create_profile"]["id"], answer
    again = {"input": {"platform_id": handle(), "display_name": "Never"}}
    status, answer, headers = await over_get(api, user, variables=again,
                                             extensions=persisted(text))
    assert_error(status, answer, 405, "method_not_allowed")
    assert headers["Allow"] == "POST"
    await _never_created(api, user, again["input"]["platform_id"])


async def test_a_subscription_is_405(api: Api, user: User) -> None:
    query = "subscription { rsvp_stats(event_id: \"evt_x\") { going } }"
    status, answer, headers = await over_get(api, user, query=query)
    error = assert_error(status, answer, 405, "method_not_allowed", param="query")
    assert "subscription over WebSocket" in error["message"], error
    assert headers["Allow"] == "POST"


# ---------------------------------------------------------------------------
# Persisted queries


async def test_a_hash_alone_answers_once_its_query_is_known(api: Api, user: User) -> None:
    for register in (over_post, over_get):
        text = fresh("{ organizations { data { id } } }")
        status, answer, _ = await over_get(api, user, extensions=persisted(text))
        assert status == 200, answer
        assert answer == {"data": None, "errors": [{
            "message": "PersistedQueryNotFound",
            "extensions": {"code": "PERSISTED_QUERY_NOT_FOUND"}}]}
        # The client sends the query with its hash, by POST or by GET ...
        expected = {"data": {"organizations": {"data": [{"id": user.organization_id}]}}}
        status, answer, _ = await register(api, user, query=text, extensions=persisted(text))
        assert (status, answer) == (200, expected), register
        # ... and from then on the hash alone answers, over GET as over POST.
        for again in (over_get, over_post):
            status, answer, _ = await again(api, user, extensions=persisted(text))
            assert (status, answer) == (200, expected), (register, again)


async def test_a_hash_that_is_not_the_query_s_is_refused_as_over_post(api: Api,
                                                                      user: User) -> None:
    text = fresh("{ organizations { has_more } }")
    wrong = {"persistedQuery": {"version": 1, "sha256Hash": sha256(text + " ")}}
    status, answer, _ = await over_get(api, user, query=text, extensions=wrong)
    assert_error(status, answer, 400, "invalid_field",
                 param="extensions.persistedQuery.sha256Hash")
    posted = await over_post(api, user, query=text, extensions=wrong)
    assert (posted[0], without_request_id(posted[1])) == (status, without_request_id(answer))
    # Nothing stored under either hash.
    for extensions in (wrong, persisted(text)):
        _, answer, _ = await over_get(api, user, extensions=extensions)
        assert answer["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"


# ---------------------------------------------------------------------------
# Malformed requests


TYPENAME = "query=%7B__typename%7D"


@pytest.mark.parametrize(("query_string", "code", "param"), [
    (f"{TYPENAME}&variables=%7Bnope", "invalid_query_parameter", "variables"),
    (f"{TYPENAME}&variables=%5B1%5D", "invalid_query_parameter", "variables"),
    (f"{TYPENAME}&variables=%22x%22", "invalid_query_parameter", "variables"),
    (f"{TYPENAME}&extensions=%7B%22persistedQuery%22", "invalid_query_parameter", "extensions"),
    (f"{TYPENAME}&extensions=7", "invalid_query_parameter", "extensions"),
    ("extensions=%7B%22persistedQuery%22%3A%7B%22version%22%3A2%7D%7D", "invalid_field",
     "extensions.persistedQuery.version"),
    ("extensions=%7B%7D", "missing_field", "query"),
    ("operationName=Q&variables=%7B%7D", "missing_field", "query"),
])
async def test_malformed_parameters_are_400(api: Api, user: User, query_string: str,
                                            code: str, param: str) -> None:
    status, answer, headers = await api.get("/graphql?" + query_string, user)
    error = assert_error(status, answer, 400, code, param=param)
    assert error["type"] == "invalid_request_error"
    # Without `query` or `extensions`, Accept chose JSON over the page.
    named = "query=" in query_string or "extensions=" in query_string
    assert headers["Vary"] == ("Authorization" if named else "Accept, Authorization")


async def test_empty_parameters_are_absent(api: Api, user: User) -> None:
    status, answer, _ = await api.get(
        "/graphql?query=%7B__typename%7D&variables=&operationName=&extensions=", user)
    assert (status, answer) == (200, {"data": {"__typename": "Query"}})


async def test_without_a_document_in_the_url_accept_chose_json(api: Api, user: User) -> None:
    """Not a browser, and no document: POST's missing query, marked as depending on
    Accept too (a browser is given the page there)."""
    status, answer, headers = await api.get("/graphql", user,
                                            headers={"Accept": "application/json"})
    assert_error(status, answer, 400, "missing_field", param="query")
    assert headers["Vary"] == "Accept, Authorization"


# ---------------------------------------------------------------------------
# Keys and rate limits


@pytest.mark.parametrize("authorization", [None, "Bearer kal_not-a-real-key", "Basic abc"])
async def test_without_a_valid_key_the_answer_is_post_s(api: Api, authorization: str | None
                                                        ) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    status, answer, got = await api.get("/graphql", params=parameters(query="{ __typename }"),
                                        headers=headers)
    error = assert_error(status, answer, 401, "not_authenticated")
    assert error["type"] == "authentication_error"
    assert got["Vary"] == "Authorization"
    posted, posted_answer, posted_headers = await api.post(
        "/graphql", json={"query": "{ __typename }"}, headers=headers)
    assert (posted, without_request_id(posted_answer)) == (status, without_request_id(answer))
    assert got["WWW-Authenticate"] == posted_headers["WWW-Authenticate"]


QUOTA = 4
WINDOW = 3600


@pytest.fixture
def limited(database_url: str) -> Iterator[LiveServer]:
    settings = Settings(rate_limit=Rate(QUOTA, WINDOW), anonymous_rate_limit=Rate(2, WINDOW))
    with own_server(database_url, "kalends_get", settings=settings, run_jobs=False) as server:
        yield server


def remaining(headers: Any) -> int:
    match = re.fullmatch(r'"default";r=(\d+);t=\d+', headers["RateLimit"])
    assert match, headers["RateLimit"]
    return int(match[1])


async def test_each_get_is_charged_once_to_the_key_s_consumer(limited: LiveServer) -> None:
    user = await asyncio.to_thread(limited.create_user)
    async with aiohttp.ClientSession() as session:
        api = Api(session, limited.url)
        # GraphiQL's page takes no key, but one sent is charged, as before.
        async with session.get(limited.url + "/graphql",
                               headers={"Accept": "text/html", **user.headers}) as page:
            assert page.status == 200
            seen = [remaining(page.headers)]
        for _ in range(QUOTA - 1):
            status, answer, headers = await over_get(api, user, query="{ __typename }")
            assert status == 200, answer
            seen.append(remaining(headers))
        assert seen == list(range(QUOTA - 1, -1, -1))  # one each, no more
        status, answer, headers = await over_get(api, user, query="{ __typename }")
        assert_error(status, answer, 429, "rate_limit_exceeded")
        assert headers["Retry-After"]
        # The same quota as POST's.
        status, answer, _ = await over_post(api, user, query="{ __typename }")
        assert_error(status, answer, 429, "rate_limit_exceeded")
