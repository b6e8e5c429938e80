"""Who an assistant is: a client ID metadata document (its `client_id` is an HTTPS URL whose JSON names the client;
fetched through the outbound guard, so a document at a private address is refused), or a client that registered
itself (RFC 7591). Client ID metadata documents are public clients (`none`); a registered client may hold a secret.
"""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from urllib.parse import urlsplit

import requests
from flask import current_app

from app.core.errors import ServiceError
from app.core.net_guard import guarded_session, outbound_allowed_hosts
from app.extensions import db
from app.models.assistants import AssistantClient, ClientKind
from app.models.base import as_utc, utcnow

DOCUMENT_MAX_BYTES = 32 * 1024
DOCUMENT_FRESH_FOR = timedelta(hours=1)
LOGO_MAX_BYTES = 64 * 1024
LOGO_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
GRANT_TYPES = ("authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
REFUSED_SCHEMES = ("javascript", "data", "file", "vbscript")


class ClientRefused(ServiceError):
    """The client cannot be used: its metadata document could not be fetched or does not describe it."""

    status = 400


def is_document_url(client_id: str) -> bool:
    parts = urlsplit(client_id)
    return parts.scheme in ("https", "http") and bool(parts.hostname)


def _document_url_allowed(client_id: str) -> bool:
    """HTTPS with a path; plain HTTP only to a host the operator allow-listed (tests serve documents on loopback)."""
    parts = urlsplit(client_id)
    if parts.username or parts.password or parts.fragment or parts.path in ("", "/"):
        return False
    if parts.scheme == "https":
        return True
    return (parts.hostname or "").lower() in outbound_allowed_hosts()


def valid_redirect_uri(uri: object) -> bool:
    """HTTPS, HTTP on loopback (RFC 8252 native apps), or an app's private scheme; never a script or data URL."""
    if not isinstance(uri, str) or not uri or len(uri) > 2000:
        return False
    parts = urlsplit(uri)
    if parts.fragment or not parts.scheme or parts.scheme.lower() in REFUSED_SCHEMES:
        return False
    if parts.scheme == "https":
        return bool(parts.hostname)
    if parts.scheme == "http":
        return (parts.hostname or "").lower() in ("127.0.0.1", "localhost", "::1")
    return True


def _fetch_document(client_id: str) -> dict:
    timeout = float(current_app.config.get("OUTBOUND_TIMEOUT_SECONDS", 10))
    try:
        with guarded_session().get(
            client_id,
            timeout=timeout,
            allow_redirects=False,
            stream=True,
            headers={"Accept": "application/json"},
            verify=current_app.config.get("OUTBOUND_CA_BUNDLE") or True,
        ) as response:
            if response.status_code != 200:
                raise ClientRefused(f"The client's metadata document answered HTTP {response.status_code}.")
            body = response.raw.read(DOCUMENT_MAX_BYTES + 1, decode_content=True)
    except requests.RequestException as err:
        private = "private or local" in str(err)
        reason = (
            "its address is private or local, which is not allowed" if private else "it could not be reached"
        )
        raise ClientRefused(f"The client's metadata document could not be fetched: {reason}.") from None
    if len(body) > DOCUMENT_MAX_BYTES:
        raise ClientRefused("The client's metadata document is too large.")
    try:
        document = json.loads(body)
    except ValueError:
        raise ClientRefused("The client's metadata document is not JSON.") from None
    if not isinstance(document, dict):
        raise ClientRefused("The client's metadata document is not a JSON object.")
    return document


def _logo_data(url: str | None) -> str | None:
    """The logo as a data: URL, when it is a small PNG, JPEG, GIF or WebP image that answers in time; else None
    (a logo is decoration: a failure never refuses the client)."""
    if not url:
        return None
    timeout = float(current_app.config.get("OUTBOUND_TIMEOUT_SECONDS", 10))
    try:
        with guarded_session().get(
            url,
            timeout=timeout,
            allow_redirects=False,
            stream=True,
            verify=current_app.config.get("OUTBOUND_CA_BUNDLE") or True,
        ) as response:
            kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if response.status_code != 200 or kind not in LOGO_TYPES:
                return None
            body = response.raw.read(LOGO_MAX_BYTES + 1, decode_content=True)
    except requests.RequestException:
        return None
    if len(body) > LOGO_MAX_BYTES:
        return None
    return f"data:{kind};base64,{base64.b64encode(body).decode()}"


def _from_document(client_id: str, document: dict) -> dict:
    """The client's fields from its document (draft-ietf-oauth-client-id-metadata-document): it must name itself by
    the URL it was fetched from, list its redirect URIs, and authenticate with nothing (`none`)."""
    if document.get("client_id") != client_id:
        raise ClientRefused("The client's metadata document names a different client_id.")
    redirect_uris = document.get("redirect_uris")
    if (
        not isinstance(redirect_uris, list)
        or not redirect_uris
        or not all(map(valid_redirect_uri, redirect_uris))
    ):
        raise ClientRefused("The client's metadata document lists no usable redirect_uris.")
    method = document.get("token_endpoint_auth_method", "none")
    if method != "none":
        raise ClientRefused(
            "A client identified by a metadata document must use token_endpoint_auth_method none."
        )
    grant_types = document.get("grant_types") or ["authorization_code", "refresh_token"]
    return {
        "client_name": _text(document.get("client_name")) or urlsplit(client_id).hostname or client_id,
        "client_uri": _url(document.get("client_uri")),
        "logo_uri": _url(document.get("logo_uri")),
        "redirect_uris": redirect_uris,
        "grant_types": [g for g in grant_types if g in GRANT_TYPES] if isinstance(grant_types, list) else [],
        "token_endpoint_auth_method": "none",
    }


def _text(value: object) -> str | None:
    return value.strip()[:200] if isinstance(value, str) and value.strip() else None


def _url(value: object) -> str | None:
    return (
        value if isinstance(value, str) and urlsplit(value).scheme == "https" and len(value) <= 2000 else None
    )


def find_client(client_id: str) -> AssistantClient | None:
    """The client behind `client_id`: a registered one, or a metadata document (fetched when new or stale; a
    document that cannot be fetched or does not describe the client raises ClientRefused)."""
    if not client_id or len(client_id) > 2000:
        return None
    row = db.session.query(AssistantClient).filter_by(client_id=client_id).one_or_none()
    if row is not None and row.kind == ClientKind.REGISTERED:
        return row
    if not is_document_url(client_id):
        return None
    if not _document_url_allowed(client_id):
        raise ClientRefused("A client_id URL must be an https URL with a path.")
    fetched = as_utc(row.fetched_at) if row is not None else None
    if row is not None and fetched is not None and fetched + DOCUMENT_FRESH_FOR > utcnow():
        return row
    document = _fetch_document(client_id)
    fields = _from_document(client_id, document)
    if row is None:
        row = AssistantClient(client_id=client_id, kind=ClientKind.METADATA_DOCUMENT)
        db.session.add(row)
    for name, value in fields.items():
        setattr(row, name, value)
    row.logo_data = _logo_data(row.logo_uri)
    row.document = document
    row.fetched_at = utcnow()
    db.session.flush()
    return row


def register_client(client_id: str, metadata: dict, secret_digest: str | None) -> AssistantClient:
    """Store a client that registered itself (RFC 7591); its metadata was validated by Authlib's claims."""
    redirect_uris = metadata.get("redirect_uris") or []
    if not all(map(valid_redirect_uri, redirect_uris)):
        raise ClientRefused("redirect_uris must be https, http on loopback, or an app's own scheme.")
    row = AssistantClient(
        client_id=client_id,
        kind=ClientKind.REGISTERED,
        client_name=_text(metadata.get("client_name")) or "Unnamed assistant",
        client_uri=_url(metadata.get("client_uri")),
        logo_uri=_url(metadata.get("logo_uri")),
        redirect_uris=redirect_uris,
        grant_types=[g for g in metadata.get("grant_types") or ["authorization_code"] if g in GRANT_TYPES],
        token_endpoint_auth_method=metadata.get("token_endpoint_auth_method") or "client_secret_basic",
        client_secret_hash=secret_digest,
        document=metadata,
    )
    db.session.add(row)
    db.session.flush()
    return row
