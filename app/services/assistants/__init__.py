"""Bring your own assistant (issue 29): an OAuth authorization server through which a person's MCP client (Claude
Code, Cursor, VS Code, ChatGPT, a script) signs in once and then calls `/mcp/gateway` as an agent of that person.

- `urls`: the issuer, the protected resource and every metadata document (RFC 8414, RFC 9728).
- `clients`: who the client is (client ID metadata documents through the outbound guard, RFC 7591 registration).
- `server`: Authlib's authorization server (code + PKCE S256, refresh rotation, revocation, device grant).
- `grants`: the person's consent, the assistant agent and its open-ended session run; Disconnect.
"""
