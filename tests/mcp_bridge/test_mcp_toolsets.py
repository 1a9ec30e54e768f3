"""Toolsets (docs/mcp.md): a client narrows either MCP route's catalogue by header or
query, and gets the core toolset when it names none; and the catalogue says each thing
once, leaving out only what docs/mcp.md says it leaves out.

Counts and names come from the registry (operations are added all the time): never
from numbers written here.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import date, timedelta
from typing import Any

import httpx2
import jsonschema  # type: ignore[import-untyped]
import orjson
import pytest
from conftest import caller_on
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult
from multidict import CIMultiDict, MultiDict
from oauth_flow import tokens_for

import kalends.service.app  # noqa: F401  (registers and prepares every operation)
from mcp_bridge import schemas, tools, toolsets
from mcp_bridge.toolsets import Selection
from registry import OPERATIONS, Operation
from registry.toolsets import CORE, CORE_TOOLS

MODERN = "2026-07-28"
ROUTES = ["/mcp-developer", "/mcp"]
EVERY = toolsets.toolsets(OPERATIONS.values())
TAGGED = {name: ops for name, ops in EVERY.items() if name != CORE}
ALL = Selection(frozenset(EVERY))
# The MCP specification's defaults of ToolAnnotations (tools.mdx): what an absent hint means.
HINT_DEFAULTS = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False,
                 "openWorldHint": True}


def _names(selection: Selection) -> list[str]:
    return [op.name for op in OPERATIONS.values() if selection.admits(op)]


def _outside(selection: Selection) -> Operation:
    return next(op for op in OPERATIONS.values() if not selection.admits(op))


# -- selection rules, from the registry -------------------------------------------------


def test_toolsets_are_the_registry_tags_and_core() -> None:
    assert set(TAGGED) == {op.tag.lower().replace(" ", "-") for op in OPERATIONS.values()}
    assert sum(len(ops) for ops in TAGGED.values()) == len(OPERATIONS)
    assert {"events", "rsvps", "calendars", "agenda"} <= set(EVERY)
    assert next(iter(EVERY)) == CORE and "all" not in EVERY
    assert [op.name for op in EVERY[CORE]] == [n for n in OPERATIONS if n in CORE_TOOLS]
    for name in EVERY:
        assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", name), name
    if any(op.tag == "External calendars" for op in OPERATIONS.values()):
        assert "external-calendars" in EVERY


def _requested(headers: dict[str, str] | None = None, query: str = "") -> Selection:
    parsed = MultiDict(
        (k, v) for k, _, v in (p.partition("=") for p in query.split("&") if p))
    return toolsets.requested(CIMultiDict(headers or {}), parsed, EVERY)


def test_selection_rules() -> None:
    both = frozenset({"calendars", "agenda"})
    assert _requested() == Selection()
    assert _requested(query="toolsets=calendars,agenda") == Selection(both)
    assert _requested({"x-mcp-toolsets": " Calendars ,AGENDA,,nope "}) == Selection(both)
    # Repeated: the intersection of what each names (a narrowing fails closed).
    assert _requested(query="toolsets=calendars,agenda&toolsets=agenda,events") == \
        Selection(frozenset({"agenda"}))
    # Unknown names are ignored; a selection of nothing known narrows nothing.
    assert _requested(query="toolsets=nope,") == Selection()
    assert _requested({"X-MCP-Toolsets": ""}) == Selection()
    # Neither the header nor the query widens what the other narrowed (a narrowing
    # fails closed; tests/mcp_bridge/test_mcp_narrowing.py has every form).
    assert _requested({"X-MCP-Toolsets": "events,agenda"}, "toolsets=agenda&readonly=true") == \
        Selection(frozenset({"agenda"}), read_only=True)
    assert _requested({"X-MCP-Readonly": "false"}, "readonly=true") == Selection(read_only=True)
    for value in ("true", "TRUE", " 1 ", "True", "true,true", "false, true"):
        assert _requested({"X-MCP-Readonly": value}).read_only, value
        assert _requested(query=f"readonly={value.strip()}").read_only, value
    for value in ("false", "0", "", "yes", "on", "false,no"):
        assert not _requested({"X-MCP-Readonly": value}).read_only, value
    # `all` names every toolset, `core` included; it narrows as any other name.
    assert _requested(query="toolsets=ALL") == ALL
    assert _requested(query="toolsets=all,nope") == ALL
    assert _requested({"X-MCP-Toolsets": "all"}, "toolsets=agenda") == \
        Selection(frozenset({"agenda"}))
    assert _requested(query="toolsets=core,rsvps") == Selection(frozenset({CORE, "rsvps"}))


def test_selections_admit_by_tag_and_hint() -> None:
    read_only = Selection(ALL.toolsets, read_only=True)
    assert _names(read_only) == [op.name for op in OPERATIONS.values() if op.mcp.read_only]
    assert 0 < len(_names(read_only)) < len(OPERATIONS)
    events = Selection(frozenset({"events"}), read_only=True)
    assert _names(events) == [op.name for op in EVERY["events"] if op.mcp.read_only]
    # No toolset named: core's tools, in registry order.
    assert _names(Selection()) == [n for n in OPERATIONS if n in CORE_TOOLS]
    assert _names(Selection(read_only=True)) == [
        n for n in OPERATIONS if n in CORE_TOOLS and OPERATIONS[n].mcp.read_only]
    # Core with a tag: both, each once.
    both = Selection(frozenset({CORE, "rsvps"}))
    assert _names(both) == [op.name for op in OPERATIONS.values()
                            if op.name in CORE_TOOLS or toolsets.toolset(op) == "rsvps"]


def test_catalogues_list_a_selection_and_accept_only_its_tools() -> None:
    catalogues = tools.Catalogues(OPERATIONS)
    whole = _all(catalogues)
    assert [t["name"] for t in whole.tools] == list(OPERATIONS) and whole.names == set(OPERATIONS)
    core = catalogues.get(Selection())
    assert [t["name"] for t in core.tools] == _names(Selection()) and core.names < whole.names
    chosen = Selection(frozenset({"calendars", "agenda"}))
    narrowed = catalogues.get(chosen)
    assert [t["name"] for t in narrowed.tools] == _names(chosen)
    assert narrowed.names == set(_names(chosen))
    # The same entries, not rebuilt: a tool reads the same whichever selection lists it.
    listed = {t["name"]: t for t in whole.tools}
    assert all(t is listed[t["name"]] for t in narrowed.tools)
    assert catalogues.get(chosen) is narrowed


def test_instructions_name_every_toolset() -> None:
    note = tools.Catalogues(OPERATIONS).get(Selection()).toolsets_note
    for name, ops in EVERY.items():
        assert f"{name} ({len(ops)})" in note
    assert f"all ({len(OPERATIONS)})" in note and "?toolsets=all" in note
    assert "X-MCP-Toolsets" in note and "?toolsets=" in note
    assert "X-MCP-Readonly" in note and "?readonly=true" in note
    # In a few lines: what is listed, the toolsets, how to ask.
    assert note.startswith(f"Listed here: the {len(EVERY[CORE])} tools of core.")
    assert len(note.splitlines()) == 3


# -- the catalogue keeps every piece of information it lists -------------------------------

def _registered(op: Operation) -> list[tuple[str, dict[str, Any]]]:
    """A tool's schemas before compaction: the registry's, less what tools/list leaves
    out on purpose (`_test_listing_leaves_out_only` below)."""
    out = [("inputSchema", schemas.without_patterns(tools.input_schema(op)))]
    output = tools.listed_output_schema(op)
    if output is not None:
        out.append(("outputSchema", output))
    return out


def _all(catalogues: tools.Catalogues) -> tools.Catalogue:
    """The catalogue of `?toolsets=all`, chosen as the route chooses a request's."""
    return catalogues.select(CIMultiDict(), MultiDict(toolsets="all"))


def _listed() -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in _all(tools.Catalogues(OPERATIONS)).tools}


def _pairs() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    listed = _listed()
    for op in OPERATIONS.values():
        for key, old in _registered(op):
            yield f"{op.name}.{key}", old, listed[op.name][key]


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        assert set(schema) == {"$ref"}, schema
        schema = root["$defs"][schema["$ref"].removeprefix("#/$defs/")]
    return schema


_SUBSCHEMA = {"items", "additionalProperties", "not", "if", "then", "else", "contains"}


def _inventory(schema: dict[str, Any], root: dict[str, Any], path: str = "",
               out: dict[str, set[tuple[str, str]]] | None = None
               ) -> dict[str, set[tuple[str, str]]]:
    """Every keyword and value a schema states, by the instance location it applies to
    (`anyOf` branches fold into their location, a `const` counts as a one-value enum
    and an enum's null as the type null); `"default": null` is left out, the one
    keyword dropped on purpose."""
    out = {} if out is None else out
    schema = _resolve(schema, root)
    facts = out.setdefault(path, set())
    for key, value in schema.items():
        if key == "$defs":
            continue
        if key == "type":
            facts.update(("type", t) for t in ([value] if isinstance(value, str) else value))
        elif key == "properties":
            for name, sub in value.items():
                facts.add(("property", name))
                _inventory(sub, root, f"{path}.{name}", out)
        elif key == "anyOf":
            for branch in value:
                _inventory(branch, root, path, out)
        elif key in _SUBSCHEMA and isinstance(value, dict):
            _inventory(value, root, f"{path}/{key}", out)
        elif key in ("enum", "const"):
            for item in value if key == "enum" else [value]:
                facts.add(("type", "null") if item is None else ("enum", orjson.dumps(item).decode()))
        elif key == "required":
            facts.add(("required", ",".join(sorted(value))))
        elif not (key == "default" and value is None):
            facts.add((key, orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()))
    return out


def test_listed_schemas_state_everything_the_registry_does() -> None:
    for where, old, new in _pairs():
        assert _inventory(new, new) == _inventory(old, old), where


def test_listed_schemas_are_self_contained_2020_12() -> None:
    for where, _, new in _pairs():
        jsonschema.Draft202012Validator.check_schema(new)
        refs = re.findall(r'"\$ref":"([^"]*)"', orjson.dumps(new).decode())
        assert all(r.startswith("#/$defs/") for r in refs), where
        # Each definition is used, more than once: it says once what was said twice.
        for name in new.get("$defs", {}):
            assert refs.count(f"#/$defs/{name}") >= 2, (where, name)
        _walk_refs_alone(new, where)


def _walk_refs_alone(node: Any, where: str) -> None:
    """A `$ref` stands alone: hosts that inline references naively lose nothing."""
    if isinstance(node, dict):
        assert "$ref" not in node or len(node) == 1, (where, node)
        for value in node.values():
            _walk_refs_alone(value, where)
    elif isinstance(node, list):
        for item in node:
            _walk_refs_alone(item, where)


# A pool of strings of the shapes the API takes, for the corpus below.
_POOL = [
    "", " ", "x", "a b", "Europe/Paris", "Not/AZone", "2026-03-08", "2026-3-8", "2026-02-30",
    "2026-03-08T19:30", "2026-03-08 19:30:00.5+01:00", "2026-03-08T19:30:00Z",
    "2026-03-08T19:30+0100", "19:30", "https://example.com/a.png", "http://[::1]:8080/x?y#z",
    "ftp://example.com", "https://", "ann@example.com", "ann", "ann_1", "FREQ=WEEKLY;BYDAY=TU",
    "profile", "profile,series", "profile,profile,profile,profile", "summary", "full",
    "opaque", "going", "event.created", "event",
]
_FIRST_DRAW = settings(database=None, derandomize=True, phases=[Phase.generate], max_examples=10,
                       suppress_health_check=list(HealthCheck))
_ID = re.compile(r"((?:\[[a-z][A-Z]\])+)_\[0-9a-fA-F\]\{32\}")


@functools.cache
def _pattern_samples(pattern: str) -> list[str]:
    """Strings that match a pattern: the first one hypothesis draws (derandomized, no
    database), and an ID of every prefix the pattern names."""
    found = find(st.from_regex(pattern), lambda _: True, settings=_FIRST_DRAW)
    ids = ["".join(re.findall(r"\[([a-z])[A-Z]\]", m)) for m in _ID.findall(pattern)]
    return [found, *(f"{p}_{'0a' * 16}" for p in ids), *(f"{p.upper()}_{'F' * 32}" for p in ids)]


def _strings(schema: dict[str, Any]) -> list[str]:
    out = list(_POOL)
    if "pattern" in schema:
        out += _pattern_samples(schema["pattern"])
    for bound in ("minLength", "maxLength"):
        if bound in schema:
            n = schema[bound]
            out += [seed + "a" * (k - len(seed)) for seed in [*out[-3:], "a"]
                    for k in (n - 1, n, n + 1) if k >= len(seed)]
    return out


def _numbers(schema: dict[str, Any]) -> list[Any]:
    out: list[Any] = [0, 1, -1, 2.5, 10**6]
    for bound in ("minimum", "maximum"):
        if bound in schema:
            out += [schema[bound] - 1, schema[bound], schema[bound] + 1]
    return out


_FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER
_PROBES: list[Any] = [None, True, False, 0, 1.5, "", "x", [], {}]


def _values(schema: dict[str, Any], root: dict[str, Any]) -> list[Any]:
    """Instances around every boundary of `schema`: ones it accepts and ones one step off."""
    schema = _resolve(schema, root)
    out: list[Any] = list(_PROBES)
    for branch in schema.get("anyOf", []):
        out += _values(branch, root)
    kinds = schema.get("type", [])
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if not kinds and {"pattern", "format", "minLength", "maxLength"} & set(schema):
        kinds = ["string"]
    out += [*schema.get("enum", []), "not-one-of-them"]
    if "const" in schema:
        out.append(schema["const"])
    if "default" in schema:
        out.append(schema["default"])
    if "string" in kinds:
        out += _strings(schema)
    if "integer" in kinds or "number" in kinds:
        out += _numbers(schema)
    if "array" in kinds:
        items = _values(schema.get("items", {}), root)
        out += [[item] for item in items]
        valid = _valid(schema.get("items", {}), root, items)
        out += [[valid, valid], [valid] * (schema.get("maxItems", 3) + 1)]
    if "object" in kinds:
        out += _objects(schema, root)
    unique: dict[bytes, Any] = {}
    for value in out:
        unique.setdefault(orjson.dumps(value, option=orjson.OPT_SORT_KEYS), value)
    return list(unique.values())


def _valid(schema: dict[str, Any], root: dict[str, Any], candidates: list[Any]) -> Any:
    check = jsonschema.Draft202012Validator({**schema, "$defs": root.get("$defs", {})},
                                            format_checker=_FORMATS)
    return next((c for c in candidates if check.is_valid(c)), candidates[0])


def _objects(schema: dict[str, Any], root: dict[str, Any]) -> list[Any]:
    """A valid object, then the same with each key left out, with each value replaced by
    each candidate of its property, with a key of no property, and the empty object."""
    candidates = {k: _values(sub, root) for k, sub in schema.get("properties", {}).items()}
    base = {k: _valid(schema["properties"][k], root, c) for k, c in candidates.items()}
    out: list[Any] = [base, {**base, "not_a_property": 1}]
    out += [{k: v for k, v in base.items() if k != left_out} for left_out in base]
    for key, values in candidates.items():
        out += [{**base, key: value} for value in values]
    return out


@pytest.mark.slow
def test_listed_schemas_accept_and_refuse_what_the_registry_schemas_do() -> None:
    """For every tool, input and output: the same verdict, format assertions on, on a
    corpus made from the registry's schema that holds accepted and refused instances."""
    for where, old, new in _pairs():
        before = jsonschema.Draft202012Validator(old, format_checker=_FORMATS)
        after = jsonschema.Draft202012Validator(new, format_checker=_FORMATS)
        corpus = _values(old, old)
        verdicts = [before.is_valid(instance) for instance in corpus]
        assert True in verdicts and False in verdicts, where
        for instance, verdict in zip(corpus, verdicts, strict=True):
            assert after.is_valid(instance) is verdict, (where, instance)


@pytest.mark.slow
def test_listed_inputs_leave_out_only_patterns() -> None:
    """Every fact of the registry's input schema but its regular expressions, and so
    every instance it accepts: the server checks them, its error naming the argument."""
    listed = _listed()
    for op in OPERATIONS.values():
        whole = tools.input_schema(op)
        new = listed[op.name]["inputSchema"]
        expected = {where: {f for f in facts if f[0] != "pattern"}
                    for where, facts in _inventory(whole, whole).items()}
        got = _inventory(new, new)
        assert got.keys() == expected.keys(), op.name
        for where, facts in got.items():
            # An ID that nothing described says its prefix instead of its pattern.
            added = {(key, value) for key, value in facts - expected[where]
                     if key == "description"
                     and re.fullmatch(r"An? [a-z]+_ ID\.", orjson.loads(value))}
            assert facts - added == expected[where], (op.name, where)
        accepts = jsonschema.Draft202012Validator(new, format_checker=_FORMATS)
        before = jsonschema.Draft202012Validator(whole, format_checker=_FORMATS)
        for instance in _values(whole, whole):
            if before.is_valid(instance):
                assert accepts.is_valid(instance), (op.name, instance)


def test_a_resource_output_lists_only_its_id() -> None:
    """What every answer holds whatever `fields` asked (its `id`; an occurrence's
    `occurrence_id`); other outputs are whole but for their titles (the OpenAPI
    component names)."""
    listed = _listed()
    for op in OPERATIONS.values():
        output = listed[op.name].get("outputSchema")
        found = op.resource
        if found is not None:
            assert found.key == ("occurrence_id" if "Occurrence" in op.name else "id"), op.name
            only_id = {"type": "object", "properties": {found.key: {"type": "string"}},
                       "required": [found.key]}
        if found is None:
            whole = tools.output_schema(op)
            assert (output is None) is (whole is None), op.name
            if whole is not None:  # no title keyword (a property may be named title)
                assert '"title":"' not in orjson.dumps(output).decode(), op.name
            continue
        assert output is not None
        if found.page:
            assert output["properties"]["data"]["items"] == only_id, op.name
            assert set(output["properties"]) == {"data", "has_more", "next_cursor"}
        else:
            assert output == only_id, op.name


def test_listing_leaves_the_registry_schemas_alone() -> None:
    before = {op.name: copy.deepcopy(_registered(op)) for op in OPERATIONS.values()}
    _all(tools.Catalogues(OPERATIONS))
    assert {op.name: _registered(op) for op in OPERATIONS.values()} == before


def test_annotations_leave_out_only_what_says_nothing() -> None:
    for name, tool in _listed().items():
        op = OPERATIONS[name]
        hints = tool["annotations"]
        assert "title" not in hints and tool["title"] == op.mcp.title
        full = {**HINT_DEFAULTS, **hints}
        stated = op.mcp.annotations
        meaningful = ["readOnlyHint", "openWorldHint"]
        if not op.mcp.read_only:
            meaningful += ["destructiveHint", "idempotentHint"]
            assert "destructiveHint" in hints, name
        assert {k: full[k] for k in meaningful} == {k: stated[k] for k in meaningful}, name
        # Nothing else is said but destructiveHint, whatever its value.
        for key, value in hints.items():
            assert value != HINT_DEFAULTS[key] or key == "destructiveHint", (name, key)


def test_the_catalogue_is_smaller_whole_and_selected() -> None:
    catalogues = tools.Catalogues(OPERATIONS)
    whole = _all(catalogues)

    def registered(catalogue: tools.Catalogue) -> int:
        entries = []
        for tool in catalogue.tools:
            op = OPERATIONS[tool["name"]]
            entry = {**tool, "annotations": op.mcp.annotations,
                     "inputSchema": tools.input_schema(op)}
            output = tools.output_schema(op)
            if output is not None:
                entry["outputSchema"] = output
            entries.append(entry)
        return len(orjson.dumps({"tools": entries}))

    def size(catalogue: tools.Catalogue) -> int:
        return len(orjson.dumps(tools.list_page(catalogue, {})))

    assert size(whole) < registered(whole)
    chosen = catalogues.get(Selection(frozenset({"calendars", "agenda"})))
    assert size(chosen) < registered(chosen)
    # What a host that needs only calendars and agenda saves, compared to the whole.
    assert size(chosen) < size(whole) / 2
    # And the core toolset, listed by default.
    core = catalogues.get(Selection())
    assert size(core) < registered(core) * 2 / 3 and size(core) < size(whole) / 2


# -- through real MCP sessions, on both routes -------------------------------------------


def _credential(route: str, user: Any, bearer: Any) -> dict[str, str]:
    return dict(caller_on(route, user, bearer).headers)


@asynccontextmanager
async def _session(url: str, headers: dict[str, str], mode: str = "auto"
                   ) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client,
    ):
        yield client


async def _listed_names(client: Client) -> list[str]:
    listed = await client.list_tools()
    assert listed.next_cursor is None
    return [tool.name for tool in listed.tools]


async def _assert_unknown(client: Client, name: str) -> None:
    with pytest.raises(MCPError) as raised:
        await client.call_tool(name, {})
    assert (raised.value.error.code, raised.value.error.message) == (-32602, f"Unknown tool: {name}")


def _ok(result: CallToolResult) -> Any:
    assert result.is_error is False, result.structured_content
    return result.structured_content


def _asking(url: str, credential: dict[str, str], form: str, headers: dict[str, str],
            query: str) -> tuple[str, dict[str, str]]:
    """The URL and headers of a request that asks for a selection in `form`: in `headers`
    (the "header" form), or as the URL's `query`."""
    if form == "header":
        return url, {**credential, **headers}
    return f"{url}?{query}", credential


@pytest.mark.parametrize("form", ["header", "query"])
@pytest.mark.parametrize("route", ROUTES)
async def test_a_selection_narrows_listing_and_calls(
    live_server: Any, user: Any, bearer: Any, route: str, form: str
) -> None:
    # Case, spaces and an unknown name, as a user may type them.
    asked = "Calendars , AGENDA,no-such-toolset"
    url, headers = _asking(live_server.url + route, _credential(route, user, bearer), form,
                           {"X-MCP-Toolsets": asked}, "toolsets=" + asked.replace(" ", "%20"))
    selection = Selection(frozenset({"calendars", "agenda"}))
    async with _session(url, headers) as client:
        assert await _listed_names(client) == _names(selection)
        assert "Listed here: the " in (client.instructions or "")
        calendars = _ok(await client.call_tool("listCalendars", {}))
        assert [c["id"] for c in calendars["data"]] == [user.calendar_id]
        await _assert_unknown(client, _outside(selection).name)
        await _assert_unknown(client, "noSuchTool")


@pytest.mark.parametrize("form", ["header", "query"])
@pytest.mark.parametrize("route", ROUTES)
async def test_readonly_lists_only_read_only_tools(
    live_server: Any, user: Any, bearer: Any, route: str, form: str
) -> None:
    url, headers = _asking(live_server.url + route, _credential(route, user, bearer), form,
                           {"X-MCP-Readonly": "true", "X-MCP-Toolsets": "events,rsvps"},
                           "readonly=1&toolsets=events,rsvps")
    selection = Selection(frozenset({"events", "rsvps"}), read_only=True)
    async with _session(url, headers) as client:
        names = await _listed_names(client)
        assert names == _names(selection) and names
        assert all(OPERATIONS[n].mcp.read_only for n in names)
        # A write tool of a selected toolset is as unknown as one of another toolset.
        await _assert_unknown(client, next(op.name for op in EVERY["events"]
                                           if not op.mcp.read_only))
        listed = _ok(await client.call_tool("listEvents", {"limit": 1}))
        assert set(listed) == {"data", "has_more", "next_cursor"}


@pytest.mark.parametrize("route", ROUTES)
async def test_no_selection_and_an_empty_one_list_core(
    live_server: Any, user: Any, bearer: Any, route: str
) -> None:
    headers = _credential(route, user, bearer)
    core = _names(Selection())
    for suffix, extra in [("", {}), ("?toolsets=nope,&readonly=no", {}),
                          ("", {"X-MCP-Toolsets": ",", "X-MCP-Readonly": "false"})]:
        async with _session(live_server.url + route + suffix, {**headers, **extra}) as client:
            assert await _listed_names(client) == core, suffix or extra
            assert f"Listed here: the {len(core)} tools of core." in (client.instructions or "")
            await _assert_unknown(client, _outside(Selection()).name)


@pytest.mark.parametrize("route", ROUTES)
async def test_all_lists_everything(live_server: Any, user: Any, bearer: Any, route: str
                                    ) -> None:
    headers = _credential(route, user, bearer)
    for suffix, extra in [("?toolsets=all", {}), ("", {"X-MCP-Toolsets": "All"}),
                          ("?toolsets=all,nope", {})]:
        async with _session(live_server.url + route + suffix, {**headers, **extra}) as client:
            assert await _listed_names(client) == list(OPERATIONS), suffix or extra
            assert f"Listed here: the {len(OPERATIONS)} tools of all." in \
                (client.instructions or "")


async def test_the_header_and_the_query_both_narrow(live_server: Any, user: Any) -> None:
    url = live_server.url + "/mcp-developer?toolsets=agenda,calendars&readonly=true"
    headers = {**user.headers, "X-MCP-Toolsets": "events,agenda", "X-MCP-Readonly": "0"}
    async with _session(url, headers) as client:
        assert await _listed_names(client) == \
            _names(Selection(frozenset({"agenda"}), read_only=True))


@pytest.mark.parametrize(("mode", "version"), [("auto", MODERN), ("legacy", "2025-11-25")])
@pytest.mark.parametrize("route", ROUTES)
async def test_discover_and_initialize_name_every_toolset(
    live_server: Any, user: Any, bearer: Any, route: str, mode: str, version: str
) -> None:
    url = live_server.url + route + "?toolsets=agenda"
    async with _session(url, _credential(route, user, bearer), mode) as client:
        assert client.protocol_version == version
        instructions = client.instructions or ""
        for name, ops in EVERY.items():
            assert f"{name} ({len(ops)})" in instructions, name
        assert "X-MCP-Toolsets" in instructions and "?toolsets=" in instructions
        assert f"Listed here: the {len(EVERY['agenda'])} tools of agenda." in instructions
        # getContext is named only where it may be called.
        assert "getContext" not in instructions


def _rpc(method: str, params: dict[str, Any], *, modern: bool) -> tuple[bytes, dict[str, str]]:
    headers = {"Content-Type": "application/json"}
    if modern:
        params = {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                            "io.modelcontextprotocol/clientCapabilities": {}}, **params}
        headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
        if "name" in params:
            headers["Mcp-Name"] = params["name"]
    else:
        headers["MCP-Protocol-Version"] = "2025-11-25"
    body = {"jsonrpc": "2.0", "id": 9, "method": method, "params": params}
    return orjson.dumps(body), headers


async def test_a_list_narrowed_by_header_is_cached_privately(api: Any, user: Any) -> None:
    """caching.mdx: a shared cache keys on the URL; the same URL narrowed by a header
    must not be served to callers who did not send it."""
    scopes = {}
    for how, path, extra in (("whole", "/mcp-developer", {}),
                             ("query", "/mcp-developer?toolsets=agenda", {}),
                             ("header", "/mcp-developer", {"X-MCP-Toolsets": "agenda"}),
                             ("readonly", "/mcp-developer", {"X-MCP-Readonly": "true"})):
        body, headers = _rpc("tools/list", {}, modern=True)
        status, answer, _ = await api.post(path, user, data=body, headers={**headers, **extra})
        assert status == 200, answer
        scopes[how] = answer["result"]["cacheScope"]
    assert scopes == {"whole": "public", "query": "public", "header": "private",
                      "readonly": "private"}


@pytest.mark.parametrize("modern", [True, False])
async def test_outside_the_selection_answers_as_an_unknown_tool(
    api: Any, live_server: Any, user: Any, modern: bool
) -> None:
    """On the wire, byte for byte but the name, in either era; and on /mcp before the
    token's scopes are looked at (a write tool a read-only token may not call)."""
    _, read_only = await tokens_for(live_server.url, user.api_key, scope="kalends:read")
    reader = dataclasses.replace(user, api_key=read_only["access_token"])
    selection = Selection(frozenset({"agenda"}))
    # Outside agenda, inside core (what the request without a header lists).
    outside = next(op.name for op in OPERATIONS.values()
                   if not selection.admits(op) and not op.mcp.read_only
                   and Selection().admits(op))
    for route, caller in (("/mcp-developer", user), ("/mcp", reader)):
        answers = []
        for name in (outside, "noSuchTool"):
            body, headers = _rpc("tools/call", {"name": name, "arguments": {}}, modern=modern)
            headers["X-MCP-Toolsets"] = "agenda"
            status, answer, _ = await api.post(route, caller, data=body, headers=headers)
            answers.append((status, orjson.dumps(answer).replace(name.encode(), b"NAME")))
        assert answers[0] == answers[1], route
        assert answers[0][0] == (400 if modern else 200)
        # Inside the selection the scope applies as before.
        body, headers = _rpc("tools/call", {"name": outside, "arguments": {}}, modern=modern)
        status, _, _ = await api.post(route, caller, data=body, headers=headers)
        assert status == (403 if route == "/mcp" else 200), route


async def test_real_results_fit_both_the_registry_and_the_listed_schemas(
    live_server: Any, user: Any
) -> None:
    """Results of real calls, which the SDK also holds to the listed output schemas."""
    listed = _listed()
    seen: list[str] = []
    url = live_server.url + "/mcp-developer?toolsets=all"
    async with _session(url, dict(user.headers)) as client:
        await client.list_tools()

        async def call(name: str, arguments: dict[str, Any]) -> Any:
            body = _ok(await client.call_tool(name, arguments))
            for schema in (tools.output_schema(OPERATIONS[name]), listed[name]["outputSchema"]):
                assert schema is not None
                jsonschema.Draft202012Validator(schema, format_checker=_FORMATS).validate(body)
            seen.append(name)
            return body

        profile = await call("createProfile", {
            "platform_id": "ts_" + secrets.token_hex(4), "display_name": "Toolsets",
            "profile_image_url": "https://example.com/a.png"})
        day = (date.today() + timedelta(days=3)).isoformat()
        event = await call("createEvent", {
            "profile_id": profile["id"], "title": "Listed", "start_time": f"{day}T19:30",
            "end_time": f"{day}T21:00", "end_timezone": "Europe/Paris",
            "start_timezone": "Europe/Paris"})
        await call("getEvent", {"event_id": event["id"], "expand": "profile,series,rsvp_stats"})
        await call("getEvent", {"event_id": event["id"], "expand": "rsvp_settings"})
        await call("createEventRsvp", {"event_id": event["id"], "status": "going"})
        await call("listEventRsvps", {"event_id": event["id"]})
        await call("cancelEvent", {"event_id": event["id"], "reason": "Rain"})
        await call("listProfileEvents", {"profile_id": profile["id"]})
        await call("createCalendarEvent", {
            "calendar_id": user.calendar_id, "title": "Mine", "start_time": f"{day}T08:00",
            "start_timezone": "Europe/Paris"})
        await call("getAgenda", {"date": day, "days": 2})
        await call("listCalendars", {})
        await call("listOrganizations", {})
        await call("updateProfile", {"profile_id": profile["id"], "header_image_url": None})
        await call("deleteEvent", {"event_id": event["id"]})
    assert len(seen) == 14
