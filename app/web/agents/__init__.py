"""The agents' door: the MCP transport (JSON-RPC over HTTP), the runtime tools and the tool gateway."""
