"""OAuth connections: authorization-server discovery, dynamic client registration, start, callback, token refresh.

An `oauth` method in the catalog connects through Authlib's OAuth 2.0 client. The client comes from the operator
(`SWITCHBOARD_OAUTH_CLIENTS`, JSON `{slug: {client_id, client_secret, authorization_endpoint?, token_endpoint?,
issuer?, scopes?}}`) or, when the method declares `dynamicClientRegistration`, from a registration (RFC 7591) made
once per company and app after discovering the authorization server from the provider's MCP server (RFC 9728
protected-resource metadata, then RFC 8414 or OpenID Connect metadata).

The flow keeps everything on the server: the state row (only its SHA-256 is stored) is single use, expires after ten
minutes and is bound to the user, draft connection, identity and audience; the PKCE verifier is encrypted and never
leaves the server. The callback consumes the state with one conditional UPDATE, so two parallel callbacks with the
same state make exactly one code exchange.

Refresh is single-flight per grant: a row lock (`SELECT ... FOR UPDATE`; a process lock on SQLite) in a unit of work
of its own, so a rotated refresh token is saved even when the caller's transaction later rolls back.

Outbound calls always carry timeouts. Tokens, client secrets and verifiers never reach activity, logs or pages; the
provider's raw `error_description` is never shown.
"""
