"""What OAuth costs an MCP call: the same `tools/call listOrganizations` on
`POST /mcp-developer` with an API key and on `POST /mcp` with an access token from
the built-in authorization server (registered, consented and exchanged through its
real endpoints), alternated A B A B on one `kalends serve` process.

    python bench/mcp_auth.py [--rounds 2] [--requests 3000] [--warmup 300] [--concurrency 16]

Prints the table and the ratio token / key of requests per second and of p50.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import aiohttp
import harness
from harness import Result, Scenario

sys.path.insert(0, str(harness.REPO / "tests"))

from oauth_flow import tokens_for

MODERN = "2026-07-28"
_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "listOrganizations", "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}}}
# listOrganizations is in the organizations toolset, not the core one listed by default.
_HEADERS = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
            "Mcp-Name": "listOrganizations", "X-MCP-Toolsets": "organizations"}


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    api_key = session.headers["Authorization"].removeprefix("Bearer ")
    _, tokens = await tokens_for(url, api_key)
    token_headers = {**_HEADERS, "Authorization": f"Bearer {tokens['access_token']}"}
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    async with aiohttp.ClientSession(headers=token_headers, connector=connector) as oauth:
        session.headers.update(_HEADERS)
        routes = {"A /mcp-developer (API key)": (session, "/mcp-developer"),
                  "B /mcp (OAuth token)": (oauth, "/mcp")}
        results: list[Result] = []
        for round_ in range(args.rounds):
            for name, (client, path) in routes.items():
                scenario = Scenario(f"{name} #{round_ + 1}", lambda i, p=path: f"{url}{p}",
                                    method="POST", body_for=lambda i: _CALL)
                results.append(await harness.measure(client, scenario, args.warmup,
                                                     args.requests, args.concurrency))
    _ratios(results)
    return results


def _ratios(results: list[Result]) -> None:
    key = [r for r in results if r.name.startswith("A ")]
    token = [r for r in results if r.name.startswith("B ")]
    rps = statistics.median(t.rps / k.rps for k, t in zip(key, token, strict=True))
    p50 = statistics.median(t.percentile(50) / k.percentile(50)
                            for k, t in zip(key, token, strict=True))
    print(f"token / key, median over rounds: req/s {rps:.2f}, p50 {p50:.2f}")


def main() -> int:
    args = harness.options(__doc__ or "", {"rounds": (2, "A B rounds")})
    return harness.run(_benchmark, args, f"{args.rounds} A B rounds")


if __name__ == "__main__":
    sys.exit(main())
