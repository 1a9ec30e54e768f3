"""Tool schemas as an agent host loads them: the registry's, each thing said once.

`compact` leaves what a schema accepts and refuses unchanged, and every property,
type, enum, format, pattern, bound, required list and description in place
(tests/mcp_bridge/test_mcp_toolsets.py checks both, tool by tool):

- A definition (pydantic's `$defs` for a nested model) referred to once is put
  where it is referred to, and one referred to nowhere goes.
- `"default": null` goes: absence from `required` already says a field may be
  left out, and on update tools leaving it out keeps the stored value, which a
  null default contradicts. Other defaults stay.
- `anyOf: [X, {"type": "null"}]`, pydantic's nullable, becomes X with
  `"type": [T, "null"]`, the form the output schemas already use, when every
  keyword of X applies to T's instances only (or is an enum, which gains null).
- A subschema that occurs more than once in one schema, and is large enough
  for a reference to be shorter, is said once under `$defs` and referred to by
  `{"$ref": "#/$defs/..."}` with no sibling keywords (hosts that inline
  references naively lose nothing). References stay inside their own schema:
  each tool's schemas are self-contained.

`without_patterns` takes the input schemas' regular expressions out: each restates
what its description or format says (an ID's prefix, `YYYY-MM-DD`, an absolute URL,
the values of a list; an ID that nothing describes gets "A prf_ ID."), they were a
quarter of what tools/list said, and the server checks each argument all the same,
its error naming the argument and the shape it takes. So a listed input schema
accepts all that the registry's does.

The registry's schemas themselves are not touched (OpenAPI is built from them).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import orjson

# Keywords that say nothing about a null instance: annotations, and assertions
# that apply to one JSON type only (JSON Schema 2020-12, validation §6).
_NULL_NEUTRAL = frozenset({
    "type", "title", "description", "default", "examples", "deprecated", "readOnly",
    "writeOnly", "format", "pattern", "minLength", "maxLength", "contentEncoding",
    "contentMediaType", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "items", "prefixItems", "contains", "minContains", "maxContains",
    "minItems", "maxItems", "uniqueItems", "unevaluatedItems", "properties",
    "patternProperties", "additionalProperties", "propertyNames", "required",
    "dependentRequired", "dependentSchemas", "minProperties", "maxProperties",
    "unevaluatedProperties",
})
_NULL = {"type": "null"}

# Where a keyword's value is a subschema, a list of them, or a map of them.
_ONE = ("items", "not", "if", "then", "else", "contains", "additionalProperties",
        "propertyNames", "unevaluatedItems", "unevaluatedProperties")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "dependentSchemas", "$defs")

# Only a subschema this large is shared, and only for a saving this large: a
# reference to a small shape (a nullable date-time) costs a reader more than the
# bytes it saves.
_MIN_SIZE = 96
_MIN_SAVING = 64
_DEF_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
# domain.ids' patterns: `^[pP][rR][fF]_[0-9a-fA-F]{32}$` is a prf_ ID.
_ID_PATTERN = re.compile(r"\^((?:\[[a-z][A-Z]\])+)_\[0-9a-fA-F\]\{32\}\$")
_LETTER = re.compile(r"\[([a-z])[A-Z]\]")


def compact(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `schema` with the rewrites above; `schema` is left as it was."""
    out = copy.deepcopy(dict(schema))
    _inline_single_uses(out)
    _tidy(out)
    _share_repeats(out)
    return out


def without_patterns(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `schema` with no `pattern` keyword; `schema` is left as it was."""
    out = copy.deepcopy(dict(schema))
    _drop_patterns(out)
    return out


def untitled(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an output schema without the titles that name the GraphQL types
    (OpenAPI's components): annotations that tell an agent nothing."""
    out = copy.deepcopy(dict(schema))
    _drop_titles(out)
    return out


def _drop_titles(node: dict[str, Any]) -> None:
    if isinstance(node.get("title"), str):
        del node["title"]
    for child, _ in _subschemas(node):
        _drop_titles(child)


def _drop_patterns(node: dict[str, Any]) -> None:
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        del node["pattern"]
        found = _ID_PATTERN.fullmatch(pattern)
        if found is not None and "description" not in node:
            # An ID nothing describes: say its prefix, which is all its pattern said.
            prefix = "".join(_LETTER.findall(found[1]))
            node["description"] = f"{'An' if prefix[0] in 'aeiou' else 'A'} {prefix}_ ID."
    for child, _ in _subschemas(node):
        _drop_patterns(child)


def _inline_single_uses(root: dict[str, Any]) -> None:
    defs = root.get("$defs")
    if not isinstance(defs, dict):
        return
    uses: dict[str, list[tuple[MutableMapping[str, Any] | list[Any], str | int]]] = {
        name: [] for name in defs}
    for container, key, _ in _slots(root):
        target = container[key].get("$ref")  # type: ignore[index]
        if isinstance(target, str) and target.removeprefix("#/$defs/") in uses:
            uses[target.removeprefix("#/$defs/")].append((container, key))
    for name, places in uses.items():
        body = defs[name]
        if not places:
            del defs[name]
        elif len(places) == 1 and f'"#/$defs/{name}"'.encode() not in orjson.dumps(body):
            container, key = places[0]
            if len(container[key]) == 1:  # type: ignore[index]
                container[key] = body  # type: ignore[index]
                del defs[name]
    if not defs:
        del root["$defs"]


def _tidy(node: dict[str, Any]) -> None:
    for child, _ in _subschemas(node):
        _tidy(child)
    if "default" in node and node["default"] is None:
        del node["default"]
    _merge_nullable(node)


def _merge_nullable(node: dict[str, Any]) -> None:
    branches = node.get("anyOf")
    if not isinstance(branches, list) or len(branches) != 2 or branches.count(_NULL) != 1:
        return
    [other] = [b for b in branches if b != _NULL]
    kind = other.get("type") if isinstance(other, dict) else None
    if not isinstance(kind, str) or kind == "null":
        return
    allowed = _NULL_NEUTRAL | {"enum", "const"}
    siblings = set(node) - {"anyOf"}
    if not set(other) <= allowed or siblings & set(other):
        return
    merged: dict[str, Any] = {"type": [kind, "null"]}
    merged.update((k, v) for k, v in node.items() if k != "anyOf")
    merged.update((k, v) for k, v in other.items() if k != "type")
    if "const" in merged:
        merged["enum"] = [merged.pop("const")]
    if "enum" in merged and None not in merged["enum"]:
        merged["enum"] = [*merged["enum"], None]
    node.clear()
    node.update(merged)


def _subschemas(node: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """Each direct subschema of `node`, with the property name it sits under ("" if none)."""
    for key in _ONE:
        value = node.get(key)
        if isinstance(value, dict):
            yield value, ""
    for key in _LIST:
        for item in node.get(key) or ():
            if isinstance(item, dict):
                yield item, ""
    for key in _MAP:
        for name, value in (node.get(key) or {}).items():
            if isinstance(value, dict):
                yield value, name if key == "properties" else ""


def _slots(node: MutableMapping[str, Any], name: str = ""
           ) -> Iterator[tuple[MutableMapping[str, Any] | list[Any], str | int, str]]:
    """Every place below `node` that holds a subschema: (container, key, property name)."""
    for key in _ONE:
        if isinstance(node.get(key), dict):
            yield node, key, name
            yield from _slots(node[key])
    for key in _LIST:
        items = node.get(key)
        if isinstance(items, list):
            for i, item in enumerate(items):
                if isinstance(item, dict):
                    yield items, i, name
                    yield from _slots(item)
    for key in _MAP:
        mapping = node.get(key)
        if isinstance(mapping, dict):
            for prop, value in mapping.items():
                if isinstance(value, dict):
                    label = prop if key == "properties" else ""
                    yield mapping, prop, label
                    yield from _slots(value, label)


def _share_repeats(root: dict[str, Any]) -> None:
    """Move repeated subschemas to `$defs`, the largest saving first, until none pays."""
    while True:
        seen: dict[bytes, list[tuple[MutableMapping[str, Any] | list[Any], str | int, str]]] = {}
        for container, key, label in _slots(root):
            value = container[key]  # type: ignore[index]
            if "$ref" in value and len(value) == 1:
                continue
            seen.setdefault(orjson.dumps(value, option=orjson.OPT_SORT_KEYS), []).append(
                (container, key, label))
        best: tuple[int, bytes, str] | None = None
        defs = root.get("$defs", {})
        for encoded, places in seen.items():
            if len(places) < 2 or len(encoded) < _MIN_SIZE:
                continue
            name = _def_name(orjson.loads(encoded), [label for _, _, label in places], defs)
            saving = _saving(len(encoded), len(places), name, bool(defs))
            if saving >= _MIN_SAVING and (best is None or saving > best[0]):
                best = (saving, encoded, name)
        if best is None:
            return
        _, encoded, name = best
        root.setdefault("$defs", {})[name] = orjson.loads(encoded)
        for container, key, _ in seen[encoded]:
            container[key] = {"$ref": f"#/$defs/{name}"}  # type: ignore[index]


def _saving(size: int, count: int, name: str, has_defs: bool) -> int:
    reference = len(orjson.dumps({"$ref": f"#/$defs/{name}"}))
    definition = len(orjson.dumps(name)) + 2 + size + (0 if has_defs else len('"$defs":{},'))
    return count * size - count * reference - definition


def _def_name(schema: Mapping[str, Any], labels: list[str], taken: Mapping[str, Any]) -> str:
    """The GraphQL type an object schema is titled with, else what the names of the
    properties it serves end with (`image_url` for profile_image_url and
    header_image_url), else its format, else those names (`start_or_end`); made
    unique among the existing definitions."""
    named = list(dict.fromkeys(label for label in labels if label))
    words = [label.split("_") for label in named]
    tail: list[str] = []
    while words and all(len(w) > len(tail) for w in words) and len(
            {tuple(w[len(w) - len(tail) - 1:]) for w in words}) == 1:
        tail = words[0][len(words[0]) - len(tail) - 1:]
    candidates = (schema.get("title"), "_".join(tail), schema.get("format"),
                  "_or_".join(named) if len(named) <= 3 else None)
    base = next((c for c in candidates if isinstance(c, str) and _DEF_NAME.fullmatch(c)),
                "shared")
    name, n = base, 2
    while name in taken:
        name, n = f"{base}{n}", n + 1
    return name
