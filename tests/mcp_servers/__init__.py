"""Real MCP servers the tests start (written with the official SDK's server class)."""
