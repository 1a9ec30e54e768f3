"""What a generated Python client makes of the committed openapi.json: the
meeting-times body takes datetimes as getFreeBusy's query does, and every tag
becomes a module named after it (`RSVPs` became `rsv_ps`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "openapi.json"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return json.loads(COMMITTED.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def client(document: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("client")
    done = subprocess.run(
        [sys.executable, "-m", "openapi_python_client", "generate", "--path", str(COMMITTED),
         "--output-path", str(out / "client"), "--meta", "none"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return out / "client"


def test_meeting_times_window_is_date_time(document: dict[str, Any]) -> None:
    body = document["components"]["schemas"]["MeetingTimesQuery"]["properties"]
    [free_busy] = [document["paths"]["/v1/free-busy"]["get"]]
    query = {p["name"]: p["schema"] for p in free_busy["parameters"]}
    for name in ("start", "end"):
        assert body[name]["type"] == "string"
        assert body[name]["format"] == "date-time", name
        # The same shape getFreeBusy's query advertises.
        assert body[name]["pattern"] == query[name]["pattern"]
        assert query[name]["format"] == "date-time"


def test_generated_client_takes_datetimes_for_meeting_times(client: Path) -> None:
    model = (client / "models" / "meeting_times_query.py").read_text(encoding="utf-8")
    assert re.search(r"^    start: datetime\.datetime$", model, re.M), model
    assert re.search(r"^    end: datetime\.datetime$", model, re.M), model


def test_no_tag_is_split_into_odd_modules(document: dict[str, Any], client: Path) -> None:
    tags = {t for item in document["paths"].values() for op in item.values()
            if isinstance(op, dict) for t in op.get("tags", ())}
    assert "RSVPs" not in tags
    expected = {t.lower().replace(" ", "_") for t in tags}
    modules = {p.name for p in (client / "api").iterdir() if p.is_dir()}
    assert modules == expected
    assert "rsvps" in modules and "rsv_ps" not in modules


def test_rsvp_toolset_keeps_its_name() -> None:
    import kalends.service.app  # noqa: F401  (registers every operation)
    from mcp_bridge.toolsets import toolset
    from registry import OPERATIONS

    assert {toolset(OPERATIONS[n]) for n in (
        "listEventRsvps", "createEventRsvp", "updateEventRsvp", "deleteEventRsvp",
        "getEventRsvpStats", "getEventRsvpSettings", "updateEventRsvpSettings")} == {"rsvps"}
