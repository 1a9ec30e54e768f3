"""Bounded work by construction (docs/api-choices.md, "Bounded work"): one way to
expand (domain/expansion.py), with the request's budget in it and beside the event
loop; GraphQL costs that count a list by its largest size; counts and summaries that
are exact or the error `expansion_limit`."""

from __future__ import annotations

import ast
import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest
from conftest import new_event, new_profile
from graphql import GraphQLList, GraphQLNonNull, GraphQLObjectType, get_named_type
from test_layout import PACKAGES

import graph.schema as graph_schema
from domain import expansion
from graph import limits

ROOT = Path(__file__).resolve().parents[2]

# The raw expanders, and the one module (with the connected expander under it)
# that may call them.
RAW = {"domain.recurrence": "occurrences", "domain.connected.occurrences": "expand"}
ALLOWED = {"domain.expansion", "domain.connected.occurrences", "domain.recurrence"}


def _module(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def raw_expanders_called(root: Path) -> list[str]:
    """`module: name` for every reference to a raw expander outside ALLOWED: the
    function imported by name, or read as an attribute of its module under any name
    it was imported as (lazy imports inside functions included)."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = _module(path, root)
            if module in ALLOWED:
                continue
            tree = ast.parse(path.read_text())
            aliases: dict[str, str] = {}  # local name -> raw module
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    for a in node.names:
                        if RAW.get(node.module) == a.name:
                            found.append(f"{module}: from {node.module} import {a.name}")
                        if f"{node.module}.{a.name}" in RAW:
                            aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                elif isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name in RAW:
                            aliases[a.asname or a.name] = a.name
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute):
                    chain = _dotted(node.value)
                    target = aliases.get(chain or "") or (chain if chain in RAW else None)
                    if target is not None and RAW[target] == node.attr:
                        found.append(f"{module}: {chain}.{node.attr}")
    return found


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def test_only_the_entry_point_calls_the_raw_expanders() -> None:
    assert raw_expanders_called(ROOT) == []


@pytest.mark.parametrize("source", [
    "from domain import recurrence\n\ndef f():\n    return recurrence.occurrences\n",
    "def f():\n    from domain.recurrence import occurrences\n",
    "import domain.recurrence as r\nx = r.occurrences\n",
    "from domain.connected import occurrences as o\nx = o.expand\n",
    "import domain.connected.occurrences\nx = domain.connected.occurrences.expand\n",
])
def test_the_walk_finds_a_planted_raw_call(tmp_path: Path, source: str) -> None:
    (tmp_path / "graph").mkdir()
    (tmp_path / "graph" / "planted.py").write_text(source)
    assert raw_expanders_called(tmp_path) != []


def _weekly() -> dict[str, Any]:
    return {"id": "evt_" + "0" * 32, "recurrence_rule": "FREQ=WEEKLY", "is_all_day": False,
            "start_time": datetime(2027, 1, 4, 9, tzinfo=UTC), "end_time": None,
            "start_timezone": "UTC", "end_timezone": "UTC", "start_date": None,
            "end_date": None}


def _window(days: int) -> expansion.Window:
    start = datetime(2027, 1, 1, tzinfo=UTC)
    return expansion.Window(start.date(), (start + timedelta(days=days)).date(),
                            ZoneInfo("UTC"), start, start + timedelta(days=days))


async def test_expansion_refuses_the_event_loop() -> None:
    with pytest.raises(RuntimeError, match="event loop"):
        expansion.spans(_weekly(), _window(30), expansion.request_budget(),
                        changes=expansion.NO_CHANGES)
    # Beside it, the same call answers.
    found, reason = await expansion.run(expansion.spans, _weekly(), _window(30),
                                        expansion.request_budget(), changes=expansion.NO_CHANGES)
    assert len(found) == 4 and reason is None


def test_a_spent_budget_says_so() -> None:
    budget = expansion.Budget(occurrences=10)
    found, reason = expansion.spans(_weekly(), _window(365), budget,
                                    changes=expansion.NO_CHANGES)
    assert reason == "expansion_limit" and budget.exhausted and len(found) <= 10
    with pytest.raises(expansion.ApiError) as raised:
        expansion.meets(_weekly(), _window(365), budget, changes=expansion.NO_CHANGES)
    assert raised.value.code == "expansion_limit"


def _change(slot: datetime, *, status: str = "scheduled", title: str | None = None,
            moved_to: datetime | None = None) -> dict[str, Any]:
    """An `event_occurrences` row of `_weekly()` as db/occurrences.py reads it."""
    return {"slot": slot.strftime("%Y%m%dT%H%M%SZ"), "original_start": slot, "status": status,
            "changes": orjson.dumps({"title": title} if title else {}).decode(),
            "start_time": moved_to, "end_time": None, "start_date": None, "end_date": None}


def test_changes_are_applied_inside_the_one_expansion() -> None:
    """docs/occurrences.md, "How changes are applied": a moved occurrence is found where it
    now is, with its own values and the ID of its slot, whether or not its slot meets the
    window; a cancelled one only for readers that ask for them."""
    weeks = [datetime(2027, 1, 4, 9, tzinfo=UTC) + timedelta(weeks=k) for k in range(8)]
    later = datetime(2027, 2, 10, 12, tzinfo=UTC)  # past the 30-day window
    earlier = datetime(2027, 1, 2, 8, tzinfo=UTC)
    changes = {_weekly()["id"]: [
        _change(weeks[0], title="First"), _change(weeks[1], moved_to=later),
        _change(weeks[2], status="cancelled"), _change(weeks[6], moved_to=earlier)]}
    found, reason = expansion.spans(_weekly(), _window(30), expansion.request_budget(),
                                    changes=changes)
    assert reason is None
    assert [s.start for s in found] == [earlier, weeks[0], weeks[3]]
    assert [s.changed.slot if s.changed else None for s in found] == [
        "20270215T090000Z", "20270104T090000Z", None]
    assert found[1].changed is not None and found[1].changed["title"] == "First"
    assert found[1].changed["recurrence_rule"] == "FREQ=WEEKLY"  # the rest: the row's
    with_cancelled, _ = expansion.spans(_weekly(), _window(30), expansion.request_budget(),
                                        changes=changes, cancelled=True)
    assert [s.start for s in with_cancelled] == [earlier, weeks[0], weeks[2], weeks[3]]
    # Without changes, the rule as it is.
    plain, _ = expansion.spans(_weekly(), _window(30), expansion.request_budget(),
                               changes=expansion.NO_CHANGES)
    assert [s.start for s in plain] == weeks[:4]


def test_a_slot_is_one_the_rule_makes() -> None:
    budget = expansion.request_budget()
    assert expansion.locate(_weekly(), "20270111T090000Z", budget) is not None
    for slot in ("20270111T090001Z", "20270104", "20261228T090000Z", "2027011T090000Z"):
        assert expansion.locate(_weekly(), slot, budget) is None, slot


def test_every_list_without_limit_has_a_largest_size() -> None:
    """A list field of objects either pages (`limit`) or is costed by its largest
    size (graph/limits.py SIZES); `*Page.data` holds its connection's limit."""
    missing = []
    for type_ in graph_schema.schema._schema.type_map.values():
        if not isinstance(type_, GraphQLObjectType) or type_.name.startswith("__"):
            continue
        for name, field in type_.fields.items():
            inner = field.type.of_type if isinstance(field.type, GraphQLNonNull) else field.type
            if not isinstance(inner, GraphQLList):
                continue
            if not isinstance(get_named_type(inner), GraphQLObjectType) or "limit" in field.args:
                continue
            if name == "data" and type_.name.endswith("Page"):
                continue
            if (type_.name, name) not in limits.SIZES:
                missing.append(f"{type_.name}.{name}")
    assert missing == []


# ---------------------------------------------------------------------------
# Through the live server


async def gql(api: Any, user: Any, query: str, **variables: Any) -> dict[str, Any]:
    status, body, _ = await api.post("/graphql", user, json={"query": query,
                                                             "variables": variables})
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def _codes(body: dict[str, Any]) -> set[str]:
    return {e.get("extensions", {}).get("code") for e in body.get("errors", [])}


def _day(offset: int) -> datetime:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=offset)


def _iso(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


SUMMARY = """
query($id: ID!, $from: String!, $to: String!) {
  profile(profile_id: $id) {
    rsvp_summary(from: $from, to: $to, bucket: "day", timezone: "UTC") {
      start events going total_attendees
    }
  }
}"""


async def test_rsvp_summary_counts_every_occurrence(api: Any, user: Any, make_user: Any
                                                    ) -> None:
    """An hourly event and a twice-daily one over 30 days: 720 + 60 occurrences,
    every one counted (the summary used to stop an event after 501 of them)."""
    profile = await new_profile(api, user)
    start = _day(1)
    hourly = await new_event(api, user, profile, title="hourly",
                             start_time=start.strftime("%Y-%m-%dT%H:%M"), start_timezone="UTC",
                             recurrence_rule="FREQ=HOURLY")
    await new_event(api, user, profile, title="twice",
                    start_time=start.strftime("%Y-%m-%dT%H:%M"), start_timezone="UTC",
                    recurrence_rule="FREQ=DAILY;BYHOUR=8,20")
    guest = await make_user()
    status, _, _ = await api.post(f"/v1/events/{hourly['id']}/rsvps", guest,
                                  json={"status": "going", "num_guests": 3})
    assert status == 201
    body = await gql(api, user, SUMMARY, id=profile["id"], **{"from": _iso(start),
                                                               "to": _iso(_day(31))})
    assert "errors" not in body, body
    buckets = body["data"]["profile"]["rsvp_summary"]
    assert len(buckets) == 30
    assert sum(b["events"] for b in buckets) == 30 * 24 + 30 * 2
    assert all(b["events"] == 26 for b in buckets)
    assert sum(b["going"] for b in buckets) == 1
    assert sum(b["total_attendees"] for b in buckets) == 3


async def test_rsvp_summary_keeps_scheduled_events_unless_asked(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    when = _day(2).strftime("%Y-%m-%dT10:00")
    await new_event(api, user, profile, title="on", start_time=when, start_timezone="UTC")
    off = await new_event(api, user, profile, title="off", start_time=when,
                          start_timezone="UTC")
    status, _, _ = await api.post(f"/v1/events/{off['id']}/cancel", user, json={})
    assert status == 200
    query = """query($id: ID!, $from: String!, $to: String!) { profile(profile_id: $id) {
      scheduled: rsvp_summary(from: $from, to: $to, bucket: "month") { events }
      all: rsvp_summary(from: $from, to: $to, bucket: "month", status: null) { events }
      cancelled: rsvp_summary(from: $from, to: $to, bucket: "month", status: "cancelled") {
        events } } }"""
    body = await gql(api, user, query, id=profile["id"], **{"from": _iso(_day(0)),
                                                            "to": _iso(_day(20))})
    assert "errors" not in body, body
    got = {k: sum(b["events"] for b in v) for k, v in body["data"]["profile"].items()}
    assert got == {"scheduled": 1, "all": 2, "cancelled": 1}


async def test_past_the_budget_a_summary_is_an_error_not_a_smaller_count(
        api: Any, user: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = await new_profile(api, user)
    start = _day(1)
    await new_event(api, user, profile, title="hourly",
                    start_time=start.strftime("%Y-%m-%dT%H:%M"), start_timezone="UTC",
                    recurrence_rule="FREQ=HOURLY")
    monkeypatch.setattr(expansion, "MAX_OCCURRENCES", 100)
    body = await gql(api, user, SUMMARY, id=profile["id"], **{"from": _iso(start),
                                                               "to": _iso(_day(31))})
    assert _codes(body) == {"expansion_limit"}, body
    assert body["data"] is None or body["data"]["profile"] is None


EVENTS_WINDOW = """
query($id: ID!, $from: String!, $to: String!) {
  profile(profile_id: $id) {
    events(limit: 5, from: $from, to: $to) { total_count data { id } }
  }
}"""


async def test_a_windowed_count_is_exact_or_an_error(
        api: Any, user: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = await new_profile(api, user)
    first = _day(1).strftime("%Y-%m-%dT09:00")
    for i in range(4):
        await new_event(api, user, profile, title=f"weekly {i}", start_time=first,
                        start_timezone="UTC", recurrence_rule="FREQ=WEEKLY")
    # Ended before the window: not counted.
    await new_event(api, user, profile, title="over", start_time=first, start_timezone="UTC",
                    recurrence_rule="FREQ=DAILY;COUNT=2")
    window = {"from": _iso(_day(20)), "to": _iso(_day(40))}
    body = await gql(api, user, EVENTS_WINDOW, id=profile["id"], **window)
    assert "errors" not in body, body
    assert body["data"]["profile"]["events"]["total_count"] == 4
    monkeypatch.setattr(expansion, "MAX_OCCURRENCES", 3)
    body = await gql(api, user, EVENTS_WINDOW, id=profile["id"], **window)
    assert _codes(body) == {"expansion_limit"}, body


async def test_the_most_occurrences_a_document_may_ask_for_are_bounded(
        api: Any, user: Any) -> None:
    """The attack of the issue: aliased pages of busy recurring events, each asking
    for 60 days of occurrences. Refused by its cost, or answered within the budget:
    never 300,000 occurrences."""
    profile = await new_profile(api, user)
    first = _day(1).strftime("%Y-%m-%dT%H:00")
    await asyncio.gather(*(
        new_event(api, user, profile, title=f"busy {i}", start_time=first,
                  start_timezone="UTC", recurrence_rule="FREQ=HOURLY;BYMINUTE=0,10,20,30,40,50")
        for i in range(30)))
    page = ("events(limit: 100, profile_ids: [$id]) { data { occurrences(from: $from, to: $to) "
            "{ start } } }")
    window = {"from": _iso(_day(1)), "to": _iso(_day(61))}
    six = "query($id: ID!, $from: String!, $to: String!) {" + " ".join(
        f"a{i}: {page}" for i in range(6)) + "}"
    body = await gql(api, user, six, id=profile["id"], **window)
    assert _codes(body) == {"query_too_costly"}, body
    assert body["errors"][0]["extensions"]["limit"] == limits.MAX_EXPANSION
    one = "query($id: ID!, $from: String!, $to: String!) {" + page + "}"
    body = await gql(api, user, one, id=profile["id"], **window)
    assert _codes(body) == {"expansion_limit"}, body["errors"][:1]
    # The nested cost of occurrences counts 500 per event, not 1.
    assert limits.SIZES[("Event", "occurrences")] == 500
