"""GET /v1/search (docs/api-choices.md, "Search"; docs/http.md, "Pages"): full-text search over
events, profiles and series, with the API's visibility rules, a type filter, rank-ordered keyset
pages, hostile input, at most two statements a page, and plans that read a
bounded number of rows however common the word (EXPLAIN ANALYZE on 60,000 events).

Every test searches for words it made up, so other tests' rows never match.
"""

from __future__ import annotations

import asyncio
import base64
import random
import string
from typing import Any

import conftest
import orjson
import pytest
from conftest import assert_error, new_event, new_profile, org_with, walk

from db import search as search_sql

ITEM_KEYS = {
    "type", "id", "title", "description", "rank", "image_url", "slug", "profile_handle",
    "date_info",
}


def word() -> str:
    """A made-up word: letters only, so every text search parser keeps it whole."""
    return "".join(random.choices(string.ascii_lowercase, k=12))


async def search(api: Any, user: Any, q: str, **params: str) -> list[dict[str, Any]]:
    """One page (the default size is plenty here) of hits."""
    status, page, _ = await api.get("/v1/search", user, params={"q": q, **params})
    assert status == 200, page
    assert set(page) == {"data", "has_more", "next_cursor"}, page
    return page["data"]  # type: ignore[no-any-return]


async def found(api: Any, user: Any, q: str, **params: str) -> set[str]:
    return {item["id"] for item in await search(api, user, q, **params)}


async def new_series(api: Any, user: Any, profile: dict[str, Any], **fields: Any
                     ) -> dict[str, Any]:
    """A series whose slug is a made-up word (`fields` over that and the default body)."""
    return await conftest.new_series(api, user, profile, **{"slug": word(), **fields})


# ---------------------------------------------------------------------------
# What is found, and what an item says


async def test_items_of_each_type(api: Any, user: Any) -> None:
    w = word()
    profile = await new_profile(
        api, user, display_name=f"{w} studio", description="Classes downtown",
        profile_image_url="https://example.com/p.png",
    )
    event = await new_event(
        api, user, profile, title=f"Morning {w}", description="Bring a mat",
        image_url="https://example.com/e.png", start_time="2031-05-06T10:00",
        start_timezone="Europe/Paris",
    )
    series = await new_series(api, user, profile, name=f"{w} season", description="Ten weeks")

    items = {item["type"]: item for item in await search(api, user, w)}
    assert set(items) == {"event", "profile", "series"}
    for item in items.values():
        assert set(item) == ITEM_KEYS, item
        assert isinstance(item["rank"], float) and item["rank"] > 0
    handle = profile["platform_id"]
    assert items["event"] | {"rank": None} == {
        "type": "event", "id": event["id"], "title": f"Morning {w}",
        "description": "Bring a mat", "rank": None, "image_url": "https://example.com/e.png",
        "slug": event["slug"], "profile_handle": handle, "date_info": "2031-05-06T08:00:00Z",
    }
    assert items["profile"] | {"rank": None} == {
        "type": "profile", "id": profile["id"], "title": f"{w} studio",
        "description": "Classes downtown", "rank": None,
        "image_url": "https://example.com/p.png", "slug": handle, "profile_handle": handle,
        "date_info": None,
    }
    assert items["series"] | {"rank": None} == {
        "type": "series", "id": series["id"], "title": f"{w} season", "description": "Ten weeks",
        "rank": None, "image_url": None, "slug": series["slug"], "profile_handle": handle,
        "date_info": None,
    }


async def test_every_searchable_field(api: Any, user: Any) -> None:
    words = [word() for _ in range(9)]
    profile = await new_profile(api, user, display_name=f"Studio {words[0]}",
                                description=f"About {words[1]}", platform_id=f"{words[2]}_x.y-z")
    by_title = await new_event(api, user, profile, title=f"Concert {words[3]}")
    by_description = await new_event(api, user, profile, description=f"With {words[4]}")
    by_location = await new_event(api, user, profile, location=f"{words[5]} hall")
    by_name = await new_series(api, user, profile, name=f"Tour {words[6]}")
    by_series_description = await new_series(api, user, profile, description=f"Of {words[7]}")

    for w in words[:3]:
        assert await found(api, user, w) == {profile["id"]}, w
    assert await found(api, user, words[3]) == {by_title["id"]}
    assert await found(api, user, words[4]) == {by_description["id"]}
    assert await found(api, user, words[5]) == {by_location["id"]}
    assert await found(api, user, words[6]) == {by_name["id"]}
    assert await found(api, user, words[7]) == {by_series_description["id"]}
    # The whole handle, and each of its parts.
    assert await found(api, user, f"{words[2]}_x.y-z") == {profile["id"]}
    assert await found(api, user, f"{words[2]} z") == {profile["id"]}
    assert await found(api, user, words[8]) == set()


async def test_changes_are_searchable_at_once(api: Any, user: Any) -> None:
    old, new = word(), word()
    profile = await new_profile(api, user)
    event = await new_event(api, user, profile, title=old)
    status, _, _ = await api.patch(f"/v1/events/{event['id']}", user, json={"title": new})
    assert status == 200
    assert await found(api, user, old) == set()
    assert await found(api, user, new) == {event["id"]}
    assert (await api.delete(f"/v1/events/{event['id']}", user))[0] == 204
    assert await found(api, user, new) == set()


# ---------------------------------------------------------------------------
# How the text is read


async def test_stems_match_other_forms_of_a_word(api: Any, user: Any) -> None:
    w = word()
    profile = await new_profile(api, user)
    event = await new_event(api, user, profile, title=f"{w} running classes")
    assert await found(api, user, f"{w} runs class") == {event["id"]}
    assert await found(api, user, f"{w} ran") == set()


async def test_the_last_word_matches_as_a_prefix(api: Any, user: Any) -> None:
    w = word()
    profile = await new_profile(api, user, display_name=f"The {w}yoga studio")
    event = await new_event(api, user, profile, title=f"Guided {w}meditation")
    assert await found(api, user, f"{w}yo") == {profile["id"]}
    assert await found(api, user, f"studio {w}yo") == {profile["id"]}
    # The english stem of "…meditation" is "…medit", which "…medita" does not
    # start; the words as written are indexed too, so the prefix still matches.
    assert await found(api, user, f"{w}medita") == {event["id"]}
    # Only the last word: an earlier partial word must match whole.
    assert await found(api, user, f"{w}yo studio") == set()
    # A closing quote asks for exactly the phrase.
    assert await found(api, user, f'"{w}yo"') == set()
    assert await found(api, user, f'"{w}yoga studio"') == {profile["id"]}


async def test_web_search_syntax(api: Any, user: Any) -> None:
    w = word()
    profile = await new_profile(api, user)
    jazz = await new_event(api, user, profile, title=f"{w} jazz night")
    rock = await new_event(api, user, profile, title=f"{w} rock night")
    assert await found(api, user, w) == {jazz["id"], rock["id"]}
    assert await found(api, user, f"{w} jazz") == {jazz["id"]}
    assert await found(api, user, f"{w} -jazz") == {rock["id"]}
    assert await found(api, user, f"{w} jazz or rock") == {jazz["id"], rock["id"]}
    assert await found(api, user, f'"night {w}"') == set()
    assert await found(api, user, f'"{w} rock night"') == {rock["id"]}


async def test_stop_words_are_searchable(api: Any, user: Any) -> None:
    """Names are also indexed as written: a stop word still counts there."""
    w = word()
    profile = await new_profile(api, user, display_name=f"The Who {w}")
    assert await found(api, user, f"the who {w}") == {profile["id"]}
    # english alone would read "the who" as nothing at all.
    assert profile["id"] in await found(api, user, "the who", type="profile", limit="100")


HOSTILE = [
    "&&&", "!", "|", "'", "''", '"', '""', '"""', "\\", "\\\\", ":*", "*", "a:*", "a:*b",
    "(((", ")", "<->", "<2>", "!(a|b)", "a & | b", "' OR 1=1 --",
    "'); DROP TABLE events; --", "$1", "%s", "{}", "\x00", "a\x00b", "\t\n\r",
    "   ", "-", "--a", "or", "or or", "- or -", "中文", "日本語のテキスト", "😀🎉", "é" * 256,
    "a" * 256, "x " * 128, "a:A", "a:*A", "a:B*", "\u200b", "\ufeff", "\u202e",
]


@pytest.mark.parametrize("q", HOSTILE)
async def test_any_text_is_answered_without_error(api: Any, user: Any, q: str) -> None:
    await search(api, user, q)


async def test_undecodable_query_strings_are_refused_and_a_nul_is_a_separator(
    api: Any, user: Any
) -> None:
    """Escapes that are not UTF-8 are `invalid_query_parameter` naming `q`
    (docs/api-choices.md); an encoded NUL is a separator, a lone `%` is sent as `%25`."""
    for raw in ("%ED%A0%80", "%FF%FE", "%C0%80"):
        status, body, _ = await api.get(f"/v1/search?q={raw}", user)
        assert_error(status, body, 400, "invalid_query_parameter", param="q")
    for raw in ("a%00b", "%"):
        status, body, _ = await api.get(f"/v1/search?q={raw}", user)
        assert status == 200, body


async def test_operators_around_a_word_still_find_it(api: Any, user: Any) -> None:
    w = word()
    profile = await new_profile(api, user)
    event = await new_event(api, user, profile, title=f"{w} o'clock")
    for q in (f"'{w}'", f"{w}:*", f"\\{w}", f"!{w}", f"({w})", f"{w} & ", f"«{w}»",
              f"{w}\x00", f"{w} o'clock"):
        assert await found(api, user, q) == {event["id"]}, q


# ---------------------------------------------------------------------------
# Parameters


async def test_q_is_required_and_1_to_256_characters(api: Any, user: Any) -> None:
    status, body, _ = await api.get("/v1/search", user)
    assert_error(status, body, 400, "invalid_query_parameter", param="q")
    status, body, _ = await api.get("/v1/search", user, params={"q": ""})
    assert_error(status, body, 400, "invalid_query_parameter", param="q")
    status, body, _ = await api.get("/v1/search", user, params={"q": "a" * 257})
    assert_error(status, body, 400, "invalid_query_parameter", param="q")
    await search(api, user, "a" * 256)


async def test_unknown_parameters_are_refused(api: Any, user: Any) -> None:
    status, body, _ = await api.get("/v1/search", user, params={"q": "a", "types": "event"})
    assert_error(status, body, 400, "invalid_query_parameter", param="types")


async def test_type_filter(api: Any, user: Any) -> None:
    w = word()
    profile = await new_profile(api, user, display_name=w)
    event = await new_event(api, user, profile, title=w)
    series = await new_series(api, user, profile, name=w)
    assert await found(api, user, w, type="event") == {event["id"]}
    assert await found(api, user, w, type="profile") == {profile["id"]}
    assert await found(api, user, w, type="series") == {series["id"]}
    assert await found(api, user, w, type="series,event") == {series["id"], event["id"]}
    assert await found(api, user, w, type="event, profile,event") == {event["id"], profile["id"]}
    assert await found(api, user, w, type="event,profile,series") == {
        event["id"], profile["id"], series["id"],
    }


@pytest.mark.parametrize("value", ["", "events", "Event", "event,", ",", "event,user", "x" * 65])
async def test_bad_type_is_refused(api: Any, user: Any, value: str) -> None:
    status, body, _ = await api.get("/v1/search", user, params={"q": "a", "type": value})
    assert_error(status, body, 400, "invalid_query_parameter", param="type")


@pytest.mark.parametrize("limit", ["0", "101", "x"])
async def test_bad_limit_is_refused(api: Any, user: Any, limit: str) -> None:
    status, body, _ = await api.get("/v1/search", user, params={"q": "a", "limit": limit})
    assert_error(status, body, 400, "invalid_query_parameter", param="limit")


async def test_needs_authentication(api: Any) -> None:
    status, body, _ = await api.get("/v1/search", None, params={"q": "a"})
    assert_error(status, body, 401, "not_authenticated")


# ---------------------------------------------------------------------------
# Visibility: the same rules as the rest of the API


async def test_private_items_of_others_never_appear(
    api: Any, user: Any, make_user: Any
) -> None:
    stranger = await make_user()
    w = word()
    public = await new_profile(api, user, display_name=w)
    private = await new_profile(api, user, display_name=w, is_private=True)
    shown = await new_event(api, user, public, title=w)
    private_event = await new_event(api, user, public, title=w, is_private=True)
    on_private_profile = await new_event(api, user, private, title=w)
    shown_series = await new_series(api, user, public, name=w)
    private_series = await new_series(api, user, public, name=w, is_private=True)
    series_on_private_profile = await new_series(api, user, private, name=w)

    everything = {
        public["id"], private["id"], shown["id"], private_event["id"],
        on_private_profile["id"], shown_series["id"], private_series["id"],
        series_on_private_profile["id"],
    }
    assert await found(api, user, w) == everything
    assert await found(api, stranger, w) == {public["id"], shown["id"], shown_series["id"]}
    # What the stranger finds, the stranger can open.
    for item in await search(api, stranger, w):
        path = {"event": "events", "profile": "profiles", "series": "series"}[item["type"]]
        assert (await api.get(f"/v1/{path}/{item['id']}", stranger))[0] == 200


async def _organizations_items(api: Any, owner: Any, org: str, **private: Any
                               ) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A made-up word, and a profile of the organization with an event and a series, all
    three named by it (`private`: is_private for the three, or nothing)."""
    w = word()
    profile = await new_profile(api, owner, organization_id=org, display_name=w, **private)
    event = await new_event(api, owner, profile, title=w, **private)
    series = await new_series(api, owner, profile, name=w, **private)
    return w, profile, event, series


async def test_organization_members_find_their_organizations_private_items(
    live_server: Any, api: Any, make_user: Any
) -> None:
    org, owner, admin, member = await org_with(live_server, make_user)
    w, profile, event, series = await _organizations_items(api, owner, org, is_private=True)
    ids = {profile["id"], event["id"], series["id"]}
    for someone in (owner, admin, member):
        assert await found(api, someone, w) == ids
        handles = {item["profile_handle"] for item in await search(api, someone, w)}
        assert handles == {profile["platform_id"]}
    outsider = await make_user()
    assert await found(api, outsider, w) == set()


async def test_a_deleted_profiles_items_follow_the_visibility_rule(
    live_server: Any, api: Any, make_user: Any
) -> None:
    org, owner, admin, member = await org_with(live_server, make_user)
    stranger = await make_user()
    w, profile, event, series = await _organizations_items(api, owner, org)
    assert await found(api, stranger, w) == {profile["id"], event["id"], series["id"]}
    assert (await api.delete(f"/v1/profiles/{profile['id']}", owner))[0] == 204

    # The profile itself is gone for everyone (GET answers 404 too); its events
    # and series stay with those who administer it, without the handle.
    for someone in (owner, admin):
        items = await search(api, someone, w)
        assert {item["id"] for item in items} == {event["id"], series["id"]}
        assert {item["profile_handle"] for item in items} == {None}
    assert await found(api, member, w) == set()
    assert await found(api, stranger, w) == set()


# ---------------------------------------------------------------------------
# Rank and pages


async def test_a_title_match_outranks_a_description_match(api: Any, user: Any) -> None:
    w = word()
    profile = await new_profile(api, user)
    located = await new_event(api, user, profile, title="Show", location=w)
    described = await new_event(api, user, profile, title="Show", description=w)
    titled = await new_event(api, user, profile, title=w)
    items = await search(api, user, w)
    assert [item["id"] for item in items] == [titled["id"], described["id"], located["id"]]
    ranks = [item["rank"] for item in items]
    assert ranks == sorted(ranks, reverse=True) and len(set(ranks)) == 3


async def make_hits(api: Any, user: Any, w: str) -> set[str]:
    """Hits of `w` with distinct ranks and with ties, of every type."""
    profile = await new_profile(api, user, display_name=w, description=f"{w} {w}")
    made = [profile["id"]]
    for fields in (
        {"title": w}, {"title": w}, {"title": w}, {"title": f"{w} {w}"},
        {"title": "Show", "description": w}, {"title": "Show", "description": w},
        {"title": "Show", "location": w}, {"title": w, "description": f"{w} {w} {w}"},
    ):
        made.append((await new_event(api, user, profile, **fields))["id"])
    for fields in ({"name": w}, {"name": w}, {"name": "Tour", "description": w}):
        made.append((await new_series(api, user, profile, **fields))["id"])
    return set(made)


def in_rank_order(items: list[dict[str, Any]]) -> bool:
    keys = [(-item["rank"], item["id"]) for item in items]
    return keys == sorted(keys)


async def test_walking_pages_of_one_sees_every_hit_once_by_rank_then_id(
    api: Any, user: Any
) -> None:
    w = word()
    made = await make_hits(api, user, w)
    walked = await walk(api, f"/v1/search?q={w}", user, limit=1)
    ids = [item["id"] for item in walked]
    assert len(ids) == len(set(ids)) == len(made)
    assert set(ids) == made
    assert in_rank_order(walked)
    assert len({item["rank"] for item in walked}) < len(walked)  # ties, broken by id
    one_page = await search(api, user, w, limit="100")
    assert one_page == walked
    for limit in (2, 5):
        assert await walk(api, f"/v1/search?q={w}", user, limit=limit) == walked
    by_type = await walk(api, f"/v1/search?q={w}&type=event,series", user, limit=2)
    assert by_type == [item for item in walked if item["type"] != "profile"]


async def test_pages_are_stable_under_inserts(api: Any, user: Any) -> None:
    w = word()
    profile = await new_profile(api, user)
    before = {(await new_event(api, user, profile, title=w))["id"] for _ in range(4)}
    status, first, _ = await api.get("/v1/search", user, params={"q": w, "limit": "2"})
    assert status == 200 and first["has_more"]
    # New hits, ranked above and below the cursor, arrive between two pages.
    await new_event(api, user, profile, title=f"{w} {w} {w}")
    await new_event(api, user, profile, title="Show", description=w)
    seen = [item["id"] for item in first["data"]]
    cursor = first["next_cursor"]
    while cursor:
        status, page, _ = await api.get("/v1/search", user,
                                        params={"q": w, "limit": "2", "cursor": cursor})
        assert status == 200, page
        seen += [item["id"] for item in page["data"]]
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen))
    assert before <= set(seen)


async def test_cursors_are_bound_to_their_query_and_caller(
    api: Any, user: Any, make_user: Any
) -> None:
    other = await make_user()
    w = word()
    profile = await new_profile(api, user)
    for _ in range(3):
        await new_event(api, user, profile, title=w)
    status, page, _ = await api.get("/v1/search", user, params={"q": w, "limit": "1"})
    assert status == 200 and page["has_more"]
    cursor = page["next_cursor"]
    ok, _, _ = await api.get("/v1/search", user, params={"q": w, "limit": "1", "cursor": cursor})
    assert ok == 200

    raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw[3] ^= 1
    edited = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    status, events_page, _ = await api.get("/v1/events", user, params={"limit": "1"})
    assert status == 200 and events_page["has_more"]
    cases = [
        (user, {"q": w, "cursor": edited}),
        (user, {"q": w, "cursor": "not-a-cursor"}),
        (user, {"q": f"{w} x", "cursor": cursor}),
        (user, {"q": w, "type": "event", "cursor": cursor}),
        (other, {"q": w, "cursor": cursor}),
        (user, {"q": w, "cursor": events_page["next_cursor"]}),
    ]
    for who, params in cases:
        status, body, _ = await api.get("/v1/search", who, params=params)
        assert_error(status, body, 400, "invalid_cursor", param="cursor")
    status, body, _ = await api.get("/v1/events", user, params={"cursor": cursor})
    assert_error(status, body, 400, "invalid_cursor", param="cursor")


# ---------------------------------------------------------------------------
# Cost


async def test_a_page_costs_three_statements_whatever_its_size(
    live_server: Any, api: Any, user: Any
) -> None:
    w = word()
    profile = await new_profile(api, user, display_name=w)
    await asyncio.gather(*(new_event(api, user, profile, title=w) for _ in range(40)))
    for _ in range(10):
        await new_series(api, user, profile, name=w)

    async def queries(**params: str) -> tuple[int, Any]:
        before = live_server.query_count
        status, page, _ = await api.get("/v1/search", user, params={"q": w, **params})
        assert status == 200, page
        return live_server.query_count - before, page

    # Authentication, the transaction's generic plans, and one statement: titles,
    # and the tiers below them when titles do not fill the page.
    count, first = await queries(limit="1")
    assert count == 3 and len(first["data"]) == 1
    count, page = await queries(limit="40", cursor=first["next_cursor"])
    assert count == 3 and len(page["data"]) == 40
    count, page = await queries(limit="100")
    assert count == 3 and len(page["data"]) == 51
    count, page = await queries(limit="100", type="event")
    assert count == 3 and len(page["data"]) == 40
    # Past titles, the tiers below alone.
    await new_event(api, user, profile, title="Other", description=w)
    count, page = await queries(limit="51")
    assert count == 3 and len(page["data"]) == 51
    count, page = await queries(limit="51", cursor=page["next_cursor"])
    assert count == 3 and [hit["title"] for hit in page["data"]] == ["Other"]


# 60,000 events over 60 profiles and 4 years, titled from a vocabulary of 5,000
# words (so the statistics know what a rare word looks like): one in 10 has
# COMMON in its title, one in 10 has DESCRIBED in its description only, 6 have
# RARE in their title.
_SEED = """
INSERT INTO users (id, email) VALUES ('usr_' || repeat('e', 32), 'plan@example.com');
INSERT INTO organizations (id, name) VALUES ('org_' || repeat('e', 32), 'Plan');
INSERT INTO profiles (id, organization_id, owner_user_id, platform_id, display_name)
SELECT 'prf_' || md5('p' || g), 'org_' || repeat('e', 32),
       'usr_' || repeat('e', 32), 'plan-' || g, 'Studio s' || g % 1500 || ' t' || g % 997
FROM generate_series(1, 60) g;
INSERT INTO events (id, profile_id, title, description, start_time, start_timezone, slug)
SELECT 'evt_' || md5('e' || g), 'prf_' || md5('p' || (1 + g % 60)),
       'Talk t' || g % 3000 || ' on s' || g * 13 % 2000
                         || CASE WHEN g % 10 = 0 THEN ' $1' ELSE '' END
                         || CASE WHEN g % 10000 = 7 THEN ' $3' ELSE '' END,
       CASE WHEN g % 10 = 5 THEN 'With $2' END,
       now() - interval '2 years' + (g * 7919 % 60000) * interval '35 minutes', 'UTC',
       'plan-' || g
FROM generate_series(1, 60000) g;
INSERT INTO series (id, profile_id, name, slug)
SELECT 'ser_' || md5('s' || g), 'prf_' || md5('p' || (1 + g % 60)),
       'Plan series ' || g, 'plan-' || g
FROM generate_series(1, 300) g;
ANALYZE profiles;
ANALYZE events;
ANALYZE series;
"""


@pytest.mark.slow
async def test_a_page_reads_a_bounded_number_of_rows_however_common_the_word(
    live_server: Any,
) -> None:
    """EXPLAIN ANALYZE of the product's own statements (db.search.sql) on 60,000
    events, seeded in a transaction that is rolled back: the first page of a word
    in 6,000 titles reads a few hundred rows of `events` in rank order, not the
    6,000; a rare word is read through the GIN indexes in every tier; a word found
    only in descriptions costs nothing in the titles' tier. And the pages are the ones
    a brute-force sort of every match by (tier, day, id) gives."""
    common, described, rare = word(), word(), word()
    viewer = "usr_" + "e" * 32

    async def brute(conn: Any, text: str, column: str) -> list[str]:
        rows = await conn.fetch(
            f"SELECT id FROM events WHERE {column} ILIKE '%' || $1 || '%' "
            "ORDER BY -search_day(start_time), id", text)
        return [r["id"] for r in rows]

    async def entries(conn: Any, after: str | None, last: str) -> int:
        """Entries of events_search_order after event `after` (None: from the first)
        up to and including event `last`."""
        return int(await conn.fetchval(
            "SELECT count(*) FROM events e, events a, events b"
            " WHERE b.id = $2 AND (a.id = $1 OR ($1::text IS NULL AND a.id = $2))"
            " AND (-search_day(e.start_time), e.id) <= (-search_day(b.start_time), b.id)"
            " AND ($1::text IS NULL"
            "      OR (-search_day(e.start_time), e.id) > (-search_day(a.start_time), a.id))",
            after, last))

    async def run(conn: Any, statement: str, text: str, *more: Any) -> tuple[Any, list[Any]]:
        args = (text, False, viewer, 21, *more)
        [row] = await conn.fetch("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, *args)
        return orjson.loads(row[0])[0]["Plan"], await conn.fetch(statement, *args)

    def event_ids(rows: list[Any]) -> list[str]:
        return [r["id"] for r in rows if r["kind"] == "event"]

    cap = search_sql.TITLE_CAP
    in_titles = search_sql.sql_titles(search_sql.KINDS, False, False)
    ordered = search_sql.sql_ordered_events(False, False)
    rest = search_sql.sql_rest(search_sql.KINDS, False, False)

    async def check() -> None:
        async with live_server.db.pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                await conn.execute(_SEED.replace("$1", common).replace("$2", described)
                                   .replace("$3", rare))
                titled = await brute(conn, common, "title")
                assert len(titled) == 6000
                # Before the common words are refreshed from the statistics, tier 3
                # stops after cap + 1 title matches: the word is common...
                plan, found = await run(conn, in_titles, common, cap)
                assert found[0]["capped"], found
                assert _rows_read(plan, "events") <= 2 * (cap + 1), plan
                # ... and is read in rank order, a few hundred rows for a page.
                await conn.execute(search_sql.ORDERED)
                plan, first = await run(conn, ordered, common)
                assert event_ids(first) == titled[:21]
                assert "events_search_order" in _indexes(plan), plan
                # The index's entries up to the 21st match (other tests' events
                # included: they share the table), and the 21 rows.
                through = await entries(conn, None, titled[20])
                assert through < 1000
                assert _rows_read(plan, "events") <= through + 21, plan
                # The next page starts from its keyset in the same index.
                last = await conn.fetchrow(
                    "SELECT -search_day(start_time) AS key, id FROM events WHERE id = $1",
                    first[-1]["id"])
                plan, second = await run(conn, search_sql.sql_ordered_events(False, True),
                                         common, last["key"], last["id"])
                assert event_ids(second) == titled[21:42]
                further = await entries(conn, titled[20], titled[41])
                assert _rows_read(plan, "events") <= further + 21, plan
                await conn.execute(search_sql.UNORDERED)

                # Once they are, the same page is walked in rank order in the first
                # statement: the index's entries are tested, not the rows, and only
                # the matches are read; the GIN index is not read at all.
                await conn.execute(search_sql.REFRESH_WORDS)
                plan, walked = await run(conn, in_titles, common, cap)
                assert not walked[0]["capped"] and event_ids(walked) == titled[:21]
                assert _rows_read(plan, "events") <= through + 21, plan
                assert _index_rows(plan, "events_title_search") == 0, plan
                assert _index_rows(plan, "events_search_order") <= through, plan
                plan, walked = await run(conn, search_sql.sql_titles(search_sql.KINDS, False, True),
                                         common, cap, last["key"], last["id"])
                assert event_ids(walked) == titled[21:42]
                assert _index_rows(plan, "events_title_search") == 0, plan
                assert _index_rows(plan, "events_search_order") <= further, plan
                # A walk that does not fill the page (here: most of those titles are
                # private to a stranger) falls back to the GIN index in the same
                # statement, and still finds every visible match, in rank order.
                public = titled[::1500]
                await conn.execute("UPDATE events SET is_private = NOT (id = ANY($1)) "
                                   "WHERE id = ANY($2)", public, titled)
                args = (common, False, "usr_" + "f" * 32, 21, cap)
                found = await conn.fetch(in_titles, *args)
                assert not found[0]["capped"] and event_ids(found) == public

                # A rare word: its few title matches, through the GIN index, sorted;
                # the tiers below in the same statement (nothing there).
                plan, found = await run(conn, in_titles, rare, cap)
                assert not found[0]["capped"]
                assert event_ids(found) == await brute(conn, rare, "title")
                assert len(event_ids(found)) == 6
                assert "events_title_search" in _indexes(plan), plan
                assert _rows_read(plan, "events") <= 2 * 6, plan
                plan, found = await run(conn, rest, rare)
                assert found == [] and _rows_read(plan, "events") <= 6, plan

                # Found only in descriptions: nothing read for titles, tier 2 sorted,
                # in the same statement.
                described_ids = (await brute(conn, described, "description"))[:21]
                plan, found = await run(conn, in_titles, described, cap)
                assert event_ids(found) == described_ids
                assert _index_rows(plan, "events_title_search") == 0, plan
                assert "events_search" in _indexes(plan), plan
                plan, found = await run(conn, rest, described)
                assert event_ids(found) == described_ids
                assert "events_search" in _indexes(plan), plan
            finally:
                await tx.rollback()

    live_server.call(check())


def _rows_read(node: dict[str, Any], relation: str) -> int:
    """Rows a plan fetched from `relation`, kept or filtered away."""
    read = 0
    if node.get("Relation Name") == relation:
        read += node["Actual Rows"] * node.get("Actual Loops", 1)
        read += node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    return read + sum(_rows_read(child, relation) for child in node.get("Plans", ()))


def _index_rows(node: dict[str, Any], index: str) -> int:
    """Entries a plan read from `index`, kept or filtered away by the node above."""
    read = 0
    if node.get("Index Name") == index:
        read += node["Actual Rows"] * node.get("Actual Loops", 1)
        read += node.get("Rows Removed by Filter", 0)
    return read + sum(_index_rows(child, index) for child in node.get("Plans", ()))


def _indexes(node: dict[str, Any]) -> set[str]:
    names = {node["Index Name"]} if "Index Name" in node else set()
    for child in node.get("Plans", ()):
        names |= _indexes(child)
    return names


async def test_every_kind_can_be_read_through_its_gin_index(live_server: Any) -> None:
    """With sequential and ordered index scans off, both statements (tier 3, the rest) reach
    events and series through their GIN indexes: the matches are plain `tsvector
    @@ tsquery` restrictions on indexed columns, weighted or not."""
    rare = word()

    async def plans() -> list[Any]:
        async with live_server.db.pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                await conn.execute(_SEED.replace("60000", "3000").replace("(1, 60) g", "(1, 3000) g")
                                   .replace("$1", word())
                                   .replace("$2", word()).replace("$3", rare))
                # Bitmap scans only: is there one on a GIN index for each kind?
                await conn.execute("SET LOCAL enable_seqscan = off")
                await conn.execute("SET LOCAL enable_indexscan = off")
                found = []
                for titles in (True, False):
                    statement = (search_sql.sql_titles if titles else search_sql.sql_rest)(
                        search_sql.KINDS, False, False)
                    args = (rare, False, "usr_" + "e" * 32, 20,
                            *((search_sql.TITLE_CAP,) if titles else ()))
                    found.append(orjson.loads(await conn.fetchval(
                        "EXPLAIN (FORMAT JSON) " + statement, *args))[0]["Plan"])
                return found
            finally:
                await tx.rollback()

    def bitmap_scans(node: dict[str, Any]) -> set[str]:
        names = {node["Index Name"]} if node["Node Type"] == "Bitmap Index Scan" else set()
        for child in node.get("Plans", []):
            names |= bitmap_scans(child)
        return names

    for titles, plan in zip((True, False), live_server.call(plans()), strict=True):
        events_index = "events_title_search" if titles else "events_search"
        # Profiles are matched by the same restriction as series (weighted, on
        # search_tsv); on a few thousand rows the planner may filter them instead.
        assert {events_index, "series_search"} <= bitmap_scans(plan), plan


# ---------------------------------------------------------------------------
# MCP


async def test_mcp_tool_is_read_only_and_answers_like_rest(api: Any, user: Any) -> None:
    w = word()
    profile = await new_profile(api, user, display_name=w)
    await new_event(api, user, profile, title=w)

    async def rpc(method: str, params: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        headers = {"Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25"}
        status, answer, _ = await api.post("/mcp-developer", user, data=orjson.dumps(body),
                                           headers=headers)
        assert status == 200, answer
        return answer["result"]

    tools: list[dict[str, Any]] = []
    cursor = None
    while True:
        listed = await rpc("tools/list", {"cursor": cursor} if cursor else {})
        tools += listed["tools"]
        cursor = listed.get("nextCursor")
        if not cursor:
            break
    [tool] = [t for t in tools if t["name"] == "search"]
    assert tool["annotations"]["readOnlyHint"] is True
    assert tool["annotations"]["idempotentHint"] is True
    assert "next_cursor" in tool["description"]
    assert set(tool["inputSchema"]["required"]) == {"q"}

    result = await rpc("tools/call", {"name": "search", "arguments": {"q": w, "limit": 1}})
    assert not result.get("isError"), result
    status, page, _ = await api.get("/v1/search", user, params={"q": w, "limit": "1"})
    assert status == 200 and result["structuredContent"] == page

    result = await rpc("tools/call", {"name": "search", "arguments": {"q": w, "type": "user"}})
    assert result["isError"] is True and "structuredContent" not in result
    error = orjson.loads(result["content"][0]["text"])["error"]  # text only: docs/mcp.md
    assert error["code"] == "invalid_query_parameter"
    assert error["param"] == "type"
