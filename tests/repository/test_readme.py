"""The README a newcomer reads: it stands on its own, is short, says how long the tests
take, and its first steps work as written (run here against the live server)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

from conftest import Api, User

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _block(after: str, language: str) -> str:
    """The first fenced block of `language` after the heading `after`."""
    start = README.index(after)
    found = re.search(rf"```{language}\n(.*?)```", README[start:], re.S)
    assert found, (after, language)
    return found.group(1)


def test_it_stands_on_its_own_and_links_what_it_moved_out() -> None:
    # That it cites no document outside the repository: tests/repository/test_docs_stand_alone.py.
    for link in re.findall(r"\]\(([^)#]+)\)", README):
        assert (ROOT / link).exists(), link
    for page in ("api-choices", "http", "graphql", "mcp", "operations", "scaling"):
        assert f"docs/{page}.md" in README
    # The entry, not the book: the reference lives in docs/.
    assert len(README.splitlines()) <= 250


def test_it_says_how_long_the_tests_take() -> None:
    intro = README[:README.index("## First steps")]
    assert re.search(r"about \d+ minutes on\s+2 idle cores", intro)
    assert "--durations=15" in (ROOT / "pyproject.toml").read_text()


async def test_the_rest_first_steps_work_as_written(api: Api, user: User) -> None:
    block = _block("### REST (developers)", "sh")
    # The subscription's body splices the shell's $PROFILE in: read it as a placeholder.
    block = block.replace("\"'$PROFILE'\"", '"$PROFILE"')
    bodies = [json.loads(b) for b in re.findall(r"-d '(\{.*?\})'", block, re.S)]
    assert len(bodies) == 5
    profile_body, event_body, recurring_body, subscription_body, cancel_body = bodies
    assert {"start_time", "start_timezone"} <= set(event_body)
    assert "Z" not in event_body["start_time"] and "+" not in event_body["start_time"]
    assert "recurrence_rule" in recurring_body
    profile_body["platform_id"] = f"readme-{user.consumer[-8:]}"
    status, profile, _ = await api.post("/v1/profiles", user, json=profile_body)
    assert status == 201, profile
    for body in (event_body, recurring_body):
        status, event, _ = await api.post(f"/v1/profiles/{profile['id']}/events", user,
                                          json=body)
        assert status == 201, event
    jam = event  # the Monday jam, as the README shows it answered
    assert _shown_after("COUNT=10", block).items() <= jam.items()
    # What the README shows the first event answering.
    status, page, _ = await api.get(f"/v1/profiles/{profile['id']}/events", user,
                                    params={"limit": "20"})
    first = page["data"][1]  # by start: the Monday jam (8 March) comes first
    assert (first["title"], first["start_time"], first["end_time"]) == (
        "Jazz night", "2027-03-12T19:00:00Z", "2027-03-12T22:00:00Z")
    # Your own profile's events reach your agenda once you subscribe to it.
    assert subscription_body == {"subscription_type": "profile", "profile_id": "$PROFILE"}
    status, body, _ = await api.post("/v1/subscriptions", user,
                                     json={**subscription_body, "profile_id": profile["id"]})
    assert status == 201, body
    deadline = time.monotonic() + 15
    while True:  # the copies are made by a background job
        status, body, _ = await api.get("/v1/agenda", user, params={"date": "2027-03-08",
                                                                    "days": "7"})
        assert status == 200, body
        titles = sorted(item["title"] for item in body["items"])
        if titles == ["Jazz night", "Monday jam"] or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert titles == ["Jazz night", "Monday jam"], body
    # The items as the README shows them: the Monday jam first, named by its copy.
    first = body["items"][0]
    assert first["occurrence_id"].startswith("cev_")
    assert first["occurrence_id"].endswith(":20270308T180000Z")
    assert {k: v for k, v in first.items() if k in ("title", "start")} == {
        "title": "Monday jam", "start": "2027-03-08T18:00:00Z"}
    # One occurrence cancelled, as written: its response is the one shown.
    path = re.search(r"curl -s (\$API/events/\$JAM/occurrences/\S+/cancel)", block)
    assert path, block
    url = path.group(1).replace("$API", "/v1").replace("$JAM", jam["id"])
    status, cancelled, _ = await api.post(url, user, json=cancel_body)
    assert status == 200, cancelled
    shown = _shown_after("Closed for the holiday", block)
    assert shown.items() <= cancelled.items()
    assert cancelled["occurrence_id"] == f"{jam['id']}:20270315T180000Z"
    status, body, _ = await api.get("/v1/agenda", user, params={"date": "2027-03-15",
                                                                "days": "1"})
    assert status == 200 and body["items"] == [], body


def _shown_after(marker: str, block: str) -> dict[str, Any]:
    """The JSON the README shows answered after the line holding `marker` (its `# {...}`
    comment lines), without what it elides (`...`, and values holding it)."""
    lines = block[block.index(marker):].splitlines()[1:]
    shown = " ".join(line.removeprefix("#").strip() for line in
                     lines[:next(i for i, line in enumerate(lines) if not line.startswith("#"))])
    answer = json.loads(re.sub(r",? \.\.\.", "", shown))
    return {k: v for k, v in answer.items() if not (isinstance(v, str) and "..." in v)}


async def test_the_graphql_first_step_runs(api: Api, user: User) -> None:
    query = _block("### GraphQL (dashboards)", "graphql")
    status, body, _ = await api.post("/graphql", user, json={"query": query})
    assert status == 200 and "errors" not in body, body


async def test_the_mcp_first_step_is_a_valid_call(api: Api, user: User) -> None:
    call: dict[str, Any] = json.loads(_block("### MCP (agents)", "json"))
    status, body, _ = await api.post("/mcp-developer", user, json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call},
        headers={"MCP-Protocol-Version": "2025-06-18", "Accept": "application/json"})
    assert status == 200, body
    result = body["result"]
    assert result["isError"] is False, result
    asked = {"id", *call["arguments"]["fields"]}
    assert all(set(e) <= asked for e in result["structuredContent"]["data"])
