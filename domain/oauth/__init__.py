"""OAuth 2.1 for MCP clients: Kalends as their authorization server, /mcp as a resource server."""
