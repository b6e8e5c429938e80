"""How tests sign an assistant in: register a client, consent as a signed-in person, exchange the code (PKCE S256),
all through the real doors (the Flask test client or a real HTTP client)."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from urllib.parse import parse_qs, urlencode, urlsplit

RESOURCE = "http://127.0.0.1:5000/mcp/gateway"  # PUBLIC_BASE_URL's gateway in the test configuration
REDIRECT = "http://127.0.0.1:8765/callback"
CSRF_RE = re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"')


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def register(client, name="Claude Code", redirect=REDIRECT, **extra) -> dict:
    body = {
        "client_name": name,
        "redirect_uris": [redirect],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        **extra,
    }
    response = client.post("/register", json=body)
    assert response.status_code == 201, response.get_data(as_text=True)
    return response.json


def authorize_query(
    client_id: str, challenge: str | None, *, redirect=REDIRECT, resource=RESOURCE, **extra
) -> str:
    params = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect, "state": "st4te"}
    if challenge is not None:
        params |= {"code_challenge": challenge, "code_challenge_method": "S256"}
    if resource is not None:
        params["resource"] = resource
    return "/authorize?" + urlencode({**params, **extra})


def consent(client, url: str, company_id, *, read_only=False, decision="allow"):
    """GET the consent page (200), then POST the person's answer with the page's CSRF token."""
    page = client.get(url)
    assert page.status_code == 200, page.get_data(as_text=True)
    token = CSRF_RE.search(page.get_data(as_text=True)).group(1)
    form = {"csrf_token": token, "company_id": str(company_id), "decision": decision}
    if read_only:
        form["read_only"] = "on"
    return client.post(url, data=form)


def code_from(response) -> dict:
    assert response.status_code == 302, response.get_data(as_text=True)
    location = urlsplit(response.headers["Location"])
    return {k: v[0] for k, v in parse_qs(location.query).items()}


def exchange(client, client_id, code, verifier, *, redirect=REDIRECT, resource=RESOURCE):
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect,
        "client_id": client_id,
        "code_verifier": verifier,
    }
    if resource is not None:
        form["resource"] = resource
    return client.post("/token", data=form)


def refresh(client, client_id, refresh_token, resource=RESOURCE):
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id}
    if resource is not None:
        form["resource"] = resource
    return client.post("/token", data=form)


def sign_in_assistant(client, company_id, **consent_options) -> tuple[str, dict]:
    """Register a public client and take it through consent and the code exchange: (client_id, token answer)."""
    client_id = register(client)["client_id"]
    verifier, challenge = pkce()
    params = code_from(consent(client, authorize_query(client_id, challenge), company_id, **consent_options))
    tokens = exchange(client, client_id, params["code"], verifier)
    assert tokens.status_code == 200, tokens.json
    return client_id, tokens.json
