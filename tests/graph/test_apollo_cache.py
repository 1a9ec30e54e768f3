"""Apollo Client's cache as docs/graphql.md ("Client caches") sets it up, run as written.

The code block of that section is the module tests/apollo_cache.mjs reads Kalends with, in
Apollo Client 4 under Node (installed from npm into .cache/apollo, as tests/npm_cache.py
does; without npm or Node 20 the test is skipped): an event read by two documents with
different `rsvp_stats` selections, a page read by two, and a list read page after page keep
every answer, with no warning. The same reads through a cache without the settings show
what they are for: Apollo warns ("Cache data may be lost when replacing the rsvp_stats
field of a Event object") and the first answers are gone.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import npm_cache
import pytest
from conftest import Api, User, new_event, new_profile

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "graphql.md"
CACHE = ROOT / ".cache" / "apollo"
SCRIPT = Path(__file__).resolve().parents[1] / "apollo_cache.mjs"
PACKAGES = {"@apollo/client": "4.3.8", "graphql": "16.15.0", "rxjs": "7.8.2"}
LOST = "Cache data may be lost"


def _documented_cache() -> str:
    """The JavaScript of docs/graphql.md's "Client caches" section, as a module."""
    section = DOC.read_text().split("## Client caches", 1)[1]
    block = re.search(r"```js\n(.*?)```", section, re.DOTALL)
    assert block is not None, "no js block under Client caches"
    return block.group(1) + "\nexport { cache };\n"


def test_the_documented_pages_are_the_schemas_page_types() -> None:
    """Every page type of the committed schema gets `merge: true`, and no other name."""
    listed = re.search(r"const pages = \[(.*?)\];", _documented_cache(), re.DOTALL)
    assert listed is not None
    documented = re.findall(r'"(\w+)"', listed.group(1))
    pages = re.findall(r"^type (\w+Page) \{", (ROOT / "schema.graphql").read_text(), re.M)
    assert documented == sorted(pages)


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    if int(re.sub(r"^v(\d+)\..*", r"\1", version.strip()) or 0) < 20:
        pytest.skip(f"node {version.strip()} is older than 20")
    return node


def _installed() -> bool:
    return all(npm_cache.version(CACHE, name) == v for name, v in PACKAGES.items())


def _read(node: str, live_url: str, user: User, ids: dict[str, str], cache_module: str
          ) -> dict[str, Any]:
    """tests/apollo_cache.mjs's report, run with `cache_module` as its cache."""
    with tempfile.TemporaryDirectory(dir=CACHE) as work:  # beside node_modules
        folder = Path(work)
        shutil.copy(SCRIPT, folder / "run.mjs")
        (folder / "cache.mjs").write_text(cache_module)
        given = {"url": live_url, "key": user.api_key, "cache": str(folder / "cache.mjs"), **ids}
        run = subprocess.run([node, "--conditions=development", str(folder / "run.mjs")],
                             input=json.dumps(given), capture_output=True, text=True,
                             timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def install() -> None:
    """Apollo Client and its peers in .cache/apollo, installed once."""
    npm_cache.install(CACHE, [f"{name}@{v}" for name, v in PACKAGES.items()], _installed)


@pytest.mark.slow  # npm install (once) and two Node processes
async def test_the_documented_cache_keeps_every_answer_without_a_warning(
        api: Api, user: User) -> None:
    node = _node()
    install()
    profile = await new_profile(api, user)
    first = await new_event(api, user, profile, start_time="2031-05-06T10:00")
    second = await new_event(api, user, profile, start_time="2031-05-07T10:00")
    status, body, _ = await api.post(f"/v1/events/{first['id']}/rsvps", user,
                                     json={"status": "going", "num_guests": 3})
    assert status == 201, body
    ids = {"event_id": first["id"], "profile_id": profile["id"]}

    documented = _read(node, api.base, user, ids, _documented_cache())
    assert documented["warnings"] == []
    stats = documented["stats"]["event"]["rsvp_stats"]
    assert stats["going"] == 1 and stats["total_attendees"] == 3, stats
    assert [e["id"] for e in documented["page"]["profile"]["events"]["data"]] == [
        first["id"], second["id"]]
    assert documented["appended"] == [first["id"], second["id"]]

    bare = _read(node, api.base, user, ids, 'import { InMemoryCache } from "@apollo/client";\n'
                                            "export const cache = new InMemoryCache();\n")
    lost = [w for w in bare["warnings"] if LOST in w]
    assert any("rsvp_stats" in w for w in lost), bare["warnings"]
    assert any("events" in w for w in lost), bare["warnings"]
    assert bare["stats"] is None and bare["page"] is None
    assert bare["appended"] == [first["id"]]
