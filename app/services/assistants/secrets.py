"""Codes and tokens of the assistants' authorization server: random, prefixed so a leak is recognisable, and stored
only as their SHA-256."""

from __future__ import annotations

import hashlib
import secrets

ACCESS_PREFIX = "sba_"
REFRESH_PREFIX = "sbr_"


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def new_access_token() -> str:
    return ACCESS_PREFIX + secrets.token_urlsafe(32)


def new_refresh_token() -> str:
    return REFRESH_PREFIX + secrets.token_urlsafe(32)


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def matches(value: str | None, stored_digest: str | None) -> bool:
    return bool(value and stored_digest) and secrets.compare_digest(digest(value or ""), stored_digest or "")
