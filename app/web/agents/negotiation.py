"""Which protocol revision a gateway request speaks, and the checks that revision asks of it.

- `MCP-Protocol-Version` names a revision we do not speak -> 400 `-32022` (UnsupportedProtocolVersion) with
  `data.supported` (every revision we speak) and `data.requested`.
- A modern request (the header names 2026-07-28, or the body carries `_meta["io.modelcontextprotocol/
  protocolVersion"]`) is served statelessly by that revision, without any `initialize`: its `_meta` must carry the
  protocol version and client capabilities (else 400 `-32602`); `MCP-Protocol-Version`, `Mcp-Method` and, for
  `tools/call`, `Mcp-Name` (Base64 sentinel decoded) must match the body (else 400 `-32020` HeaderMismatch); the
  body's version must be one we speak (else 400 `-32022`).
- Otherwise the request is legacy: the header's revision, or 2025-03-26 when it is absent (2025-06-18 "Protocol
  Version Header"). `Mcp-Method` / `Mcp-Name`, when a legacy client sends them, must match the body too.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from mcp_types.jsonrpc import HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, UNSUPPORTED_PROTOCOL_VERSION
from werkzeug.datastructures import Headers

from app.core import mcp_versions
from app.core.mcp_messages import error
from app.web.agents.exchange import Exchange, Reply

VERSION_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
# Methods whose `Mcp-Name` header mirrors a body parameter (2026-07-28 "Standard Request Headers").
NAME_PARAMS = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name"}
_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")
_ABSENT = object()


def choose(body: object, headers: Headers) -> Exchange | Reply:
    """The exchange a gateway request speaks, or the error that refuses it."""
    id_ = body.get("id") if isinstance(body, dict) else None
    header = headers.get(VERSION_HEADER)
    if header is not None and header not in mcp_versions.SUPPORTED:
        return unsupported(id_, header)
    meta_version = _meta_version(body)
    if header in mcp_versions.MODERN or (header is None and meta_version is not _ABSENT):
        if not isinstance(body, dict):
            return error(None, INVALID_REQUEST, "Invalid Request: one JSON-RPC message per request"), 400
        if "id" not in body or str(body.get("method", "")).startswith("notifications/"):
            return Exchange(version=header or str(meta_version), modern=True)
        return _modern(body, headers, id_, meta_version)
    if isinstance(body, dict) and "id" in body:
        mismatch = _header_mismatch(body, headers, required=False)
        if mismatch is not None:
            return error(id_, HEADER_MISMATCH, mismatch), 400
    return Exchange(version=header or mcp_versions.BASELINE)


def unsupported(id_: Any, requested: str) -> Reply:
    return error(
        id_,
        UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        {"supported": [*reversed(mcp_versions.SUPPORTED)], "requested": requested},
    ), 400


def _meta_version(body: object) -> object:
    if not isinstance(body, dict) or not isinstance(body.get("params"), dict):
        return _ABSENT
    meta = body["params"].get("_meta")
    if not isinstance(meta, dict) or mcp_versions.META_PROTOCOL_VERSION not in meta:
        return _ABSENT
    return meta[mcp_versions.META_PROTOCOL_VERSION]


def _modern(body: dict, headers: Headers, id_: Any, meta_version: object) -> Exchange | Reply:
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    required = (mcp_versions.META_PROTOCOL_VERSION, mcp_versions.META_CLIENT_CAPABILITIES)
    missing = [key for key in required if not isinstance(meta, dict) or key not in meta]
    if missing:
        return error(id_, INVALID_PARAMS, f"params._meta is missing {', '.join(missing)}"), 400
    if headers.get(VERSION_HEADER) != meta_version:
        return error(
            id_,
            HEADER_MISMATCH,
            f"Header mismatch: {VERSION_HEADER} does not match the request's protocol version",
        ), 400
    mismatch = _header_mismatch(body, headers, required=True)
    if mismatch is not None:
        return error(id_, HEADER_MISMATCH, mismatch), 400
    if not isinstance(meta_version, str):
        return error(id_, INVALID_PARAMS, "The protocol version in params._meta must be a string"), 400
    if meta_version not in mcp_versions.MODERN:
        return unsupported(id_, meta_version)
    return Exchange(version=meta_version, modern=True)


def _header_mismatch(body: dict, headers: Headers, *, required: bool) -> str | None:
    """Why `Mcp-Method` / `Mcp-Name` disagree with the body (or are missing when `required`), else None."""
    method = body.get("method")
    sent_method = headers.get(METHOD_HEADER)
    if sent_method is None and required:
        return f"Header mismatch: {METHOD_HEADER} is required"
    if sent_method is not None and sent_method != method:
        return f"Header mismatch: {METHOD_HEADER} does not match the request body's method"
    key = NAME_PARAMS.get(method) if isinstance(method, str) else None
    params = body.get("params")
    value = params.get(key) if key and isinstance(params, dict) else None
    if value is None:
        return None
    sent_name = headers.get(NAME_HEADER)
    if sent_name is None and not required:
        return None
    if decode_header_value(sent_name) != value:
        return f"Header mismatch: {NAME_HEADER} does not match the request body's {key}"
    return None


def decode_header_value(value: str | None) -> str | None:
    """A header value, with the `=?base64?...?=` sentinel decoded (None when absent or malformed)."""
    if value is None:
        return None
    match = _SENTINEL.fullmatch(value)
    if match is None:
        return value
    try:
        return base64.b64decode(match.group("payload"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
