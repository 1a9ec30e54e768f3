// The official TypeScript MCP SDK as an agent host drives it (tests/mcp_bridge/test_mcp_sdks.py):
// connect over Streamable HTTP, list the tools (the SDK keeps their output schemas to
// check results against), then make each call read from stdin, in order.
//   stdin:  {"url": ..., "token": ..., "calls": [{"name": ..., "arguments": {...}}, ...]}
//   stdout: {"tools": [names], "instructions": ..., "results": [{"result": CallToolResult}
//            or {"thrown": {"code": ..., "message": ...}}, ...]}
// SDK_DIR names the folder whose node_modules holds @modelcontextprotocol/sdk.
const { createRequire } = require("node:module");
const path = require("node:path");

const sdk = createRequire(path.join(process.env.SDK_DIR, "package.json"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");

async function main(input) {
  const transport = new StreamableHTTPClientTransport(new URL(input.url), {
    requestInit: { headers: { Authorization: `Bearer ${input.token}` } },
  });
  const client = new Client({ name: "kalends-tests", version: "1" });
  await client.connect(transport);
  const listed = await client.listTools();
  const results = [];
  for (const call of input.calls) {
    try {
      results.push({ result: await client.callTool(call) });
    } catch (error) {
      results.push({ thrown: { code: error.code ?? null, message: String(error.message) } });
    }
  }
  await client.close();
  return { tools: listed.tools.map((t) => t.name), instructions: client.getInstructions(),
           results };
}

let raw = "";
process.stdin.on("data", (chunk) => { raw += chunk; });
process.stdin.on("end", () => {
  main(JSON.parse(raw)).then(
    (out) => { process.stdout.write(JSON.stringify(out)); },
    (error) => { process.stderr.write(String(error && error.stack || error)); process.exit(1); },
  );
});
