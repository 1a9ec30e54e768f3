"""What the MCP tool catalogue costs an agent host's context: the `tools/list` result,
built in-process from the registry (no server), for toolset selections, in tokens.

    python bench/mcp_catalogue.py [SELECTION ...]   # default: "" (core), all, calendars,agenda

A SELECTION is what `?toolsets=` takes ("" names none: the core toolset, what a client
that asks for nothing gets); a trailing `+readonly` also asks `?readonly=true`
(`events,rsvps+readonly`). For each, three rows: `registry` is every tool entry as the
registry states it (input schemas from the request models, output schemas from the
documents, annotations in full), `lossless` the same compacted without losing anything
(mcp_bridge/schemas.compact: what tools/list returned before it left out input patterns
and resources' output properties), and `listed` what `tools/list` returns now. Columns:
tools, bytes of the result as compact JSON, its tokens (`o200k_base`, bench/token_count.py),
and the shares of output schemas, input schemas and descriptions in those bytes.
Goal: the core toolset's `listed` at most 8,000 tokens.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson
from multidict import MultiDict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import token_count  # bench/token_count.py, beside this script

import kalends.service.app  # noqa: F401  (registers and prepares every operation)
from mcp_bridge import schemas, tools, toolsets
from registry import OPERATIONS, Operation

CORE_GOAL = 8_000


def _as_registered(op: Operation) -> dict[str, Any]:
    """A tool entry before compaction: the registry's schemas and annotations as they are."""
    entry = {"name": op.name, "title": op.mcp.title, "description": op.mcp.description,
             "inputSchema": tools.input_schema(op), "annotations": dict(op.mcp.annotations)}
    output = tools.output_schema(op)
    if output is not None:
        entry["outputSchema"] = output
    return entry


def _lossless(listed: dict[str, Any]) -> dict[str, Any]:
    """A listed entry with its schemas compacted without loss, as they were listed
    before patterns and resources' output properties were left out."""
    op = OPERATIONS[listed["name"]]
    entry = {**listed, "inputSchema": schemas.compact(tools.input_schema(op))}
    output = tools.output_schema(op)
    if output is not None:
        entry["outputSchema"] = schemas.compact(output)
    return entry


def _figures(entries: list[dict[str, Any]]) -> tuple[int, str, float, float, float]:
    text = orjson.dumps({"tools": entries}).decode()
    size = len(text.encode())

    def share(key: str) -> float:
        return 100 * sum(len(orjson.dumps(e[key])) for e in entries if key in e) / size

    return size, text, share("outputSchema"), share("inputSchema"), share("description")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("selections", nargs="*", default=["", "all", "calendars,agenda"])
    args = parser.parse_args()
    catalogues = tools.Catalogues(OPERATIONS)
    rows = []
    for raw in args.selections:
        names, _, flag = raw.partition("+")
        query = MultiDict({"toolsets": names} if names else {})
        if flag == "readonly":
            query["readonly"] = "true"
        catalogue = catalogues.select(MultiDict(), query)
        listed = tools.list_page(catalogue, {})["tools"]
        forms = (("registry", [_as_registered(OPERATIONS[t["name"]]) for t in listed]),
                 ("lossless", [_lossless(t) for t in listed]), ("listed", listed))
        for form, entries in forms:
            rows.append((raw or "(none: core)", form, len(entries), *_figures(entries)))
    counted = token_count.count([row[4] for row in rows])
    print(f"{'selection':<28} {'form':<9} {'tools':>5} {'bytes':>8} {'tokens':>8} "
          f"{'output':>7} {'input':>7} {'descr.':>7}")
    for (label, form, count, size, _, output, inputs, descriptions), n in zip(
            rows, counted, strict=True):
        print(f"{label:<28} {form:<9} {count:>5} {size:>8} {n:>8} "
              f"{output:>6.1f}% {inputs:>6.1f}% {descriptions:>6.1f}%")
    core = next((n for row, n in zip(rows, counted, strict=True)
                 if row[0] == "(none: core)" and row[1] == "listed"), None)
    if core is not None:
        print(f"\ncore, listed by default: {core:,} tokens ({token_count.ENCODING}; goal: at most "
              f"{CORE_GOAL:,})")
    print("\nToolsets:", ", ".join(
        f"{name} ({len(ops)})" for name, ops in toolsets.toolsets(OPERATIONS.values()).items()))


if __name__ == "__main__":
    main()
