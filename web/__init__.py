"""The one HTTP layer every transport stands on (REST, MCP, /graphql, OAuth):
the guard (authentication, rate limits, request ids, draining), the error
envelope and JSON responses, what the HTTP parser refuses, and metrics."""
