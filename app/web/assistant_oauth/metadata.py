"""Discovery: RFC 9728 protected-resource metadata for the gateway (at the path-suffixed well-known URL and at the
root one, which older clients try), and RFC 8414 authorization-server metadata."""

from __future__ import annotations

from flask import jsonify
from flask.typing import ResponseReturnValue

from app.services.assistants import urls
from app.web.assistant_oauth import bp, schemas


@bp.get(urls.PROTECTED_RESOURCE_PATH + urls.GATEWAY_PATH)
@bp.get(urls.PROTECTED_RESOURCE_PATH)
@schemas.discovery(
    "The tool gateway's protected-resource metadata (RFC 9728)", schemas.ProtectedResourceMetadata
)
def protected_resource() -> ResponseReturnValue:
    return jsonify(urls.protected_resource_metadata())


@bp.get(urls.AUTHORIZATION_SERVER_PATH)
@schemas.discovery("Authorization-server metadata (RFC 8414)", schemas.AuthorizationServerMetadata)
def authorization_server() -> ResponseReturnValue:
    return jsonify(urls.authorization_server_metadata())
