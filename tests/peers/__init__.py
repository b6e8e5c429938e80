"""Real external peers for tests: MCP servers built with the official SDK, served over loopback sockets."""
