"""How tests call the runtime tools' REST door as an agent: its routes, its bearer header, its refusal."""

from __future__ import annotations

TOKEN_INVALID = {"error": "Runtime tools token is missing, invalid, or expired"}
SEARCH_URL = "/runtime-tools/connections/search"
REQUEST_URL = "/runtime-tools/connections/request"


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def search(client, token, query="", **extra):
    return client.post(SEARCH_URL, json={"query": query, **extra}, headers=bearer(token))


def request_service(client, token, service):
    return client.post(REQUEST_URL, json={"service": service}, headers=bearer(token))
