"""What the MCP tool catalogue costs an agent host's context: the `tools/list` result,
built in-process from the registry (no server), whole and for toolset selections.

    python bench/mcp_catalogue.py [SELECTION ...]     # default: "" (whole) and calendars,agenda

A SELECTION is what `?toolsets=` takes; a trailing `+readonly` also asks `?readonly=true`
(`events,rsvps+readonly`). For each, two rows: `registry` is every tool entry as the registry
states it (input schemas from the request models, output schemas from the documents,
annotations in full: what `tools/list` returned before the catalogue was compacted), and
`listed` is what `tools/list` returns now. Columns: tools, bytes of the result as compact
JSON, an estimate of its tokens (bytes / 4: no tokenizer is installed, and JSON schemas
run at about 4 bytes a token), and the shares of output schemas, input schemas and
descriptions in those bytes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson
from multidict import MultiDict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kalends.service.app  # noqa: F401  (registers and prepares every operation)
from kalends.registry import OPERATIONS, Operation
from mcp_bridge import tools, toolsets

BYTES_PER_TOKEN = 4


def _as_registered(op: Operation) -> dict[str, Any]:
    """A tool entry before compaction: the registry's schemas and annotations as they are."""
    entry = {"name": op.name, "title": op.mcp.title, "description": op.mcp.description,
             "inputSchema": op.tool_input_schema(), "annotations": dict(op.mcp.annotations)}
    output = tools.output_schema(op)
    if output is not None:
        entry["outputSchema"] = output
    return entry


def _figures(entries: list[dict[str, Any]]) -> tuple[int, int, float, float, float]:
    size = len(orjson.dumps({"tools": entries}))

    def share(key: str) -> float:
        return 100 * sum(len(orjson.dumps(e[key])) for e in entries if key in e) / size

    return len(entries), size, share("outputSchema"), share("inputSchema"), share("description")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("selections", nargs="*", default=["", "calendars,agenda"])
    args = parser.parse_args()
    catalogues = tools.Catalogues(OPERATIONS)
    print(f"{'selection':<28} {'form':<9} {'tools':>5} {'bytes':>8} {'~tokens':>8} "
          f"{'output':>7} {'input':>7} {'descr.':>7}")
    for raw in args.selections:
        names, _, flag = raw.partition("+")
        query = MultiDict({"toolsets": names} if names else {})
        if flag == "readonly":
            query["readonly"] = "true"
        catalogue = catalogues.select(MultiDict(), query)
        listed = tools.list_page(catalogue, {})["tools"]
        registered = [_as_registered(OPERATIONS[t["name"]]) for t in listed]
        label = raw or "(whole)"
        for form, entries in (("registry", registered), ("listed", listed)):
            count, size, output, inputs, descriptions = _figures(entries)
            print(f"{label:<28} {form:<9} {count:>5} {size:>8} {size // BYTES_PER_TOKEN:>8} "
                  f"{output:>6.1f}% {inputs:>6.1f}% {descriptions:>6.1f}%")
    print("\nToolsets:", ", ".join(
        f"{name} ({len(ops)})" for name, ops in toolsets.toolsets(OPERATIONS.values()).items()))


if __name__ == "__main__":
    main()
