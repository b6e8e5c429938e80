"""People: passwords, sign-in with throttling, personal API keys, and safe redirects after sign-in."""

from __future__ import annotations

import hashlib
import math
import secrets
import uuid
from datetime import timedelta
from urllib.parse import urlsplit

from flask import current_app
from sqlalchemy import delete, select
from werkzeug.security import check_password_hash, generate_password_hash

from app.core.errors import NotFound, TooManyRequests
from app.extensions import db
from app.models import ApiKey, LoginFailure, User
from app.models.base import as_utc, utcnow
from app.services import login_throttle

API_KEY_PREFIX = "sbk_"
# How stale `last_used_at` may get before a request refreshes it: one write per key per minute, not per request.
API_KEY_TOUCH_INTERVAL = timedelta(seconds=60)
# A constant hash to compare against when the email is unknown, so timing does not reveal which emails exist.
_DUMMY_HASH = generate_password_hash("switchboard-dummy-password", method="pbkdf2:sha256:1000")


def hash_password(password: str) -> str:
    return generate_password_hash(password, method=current_app.config["PASSWORD_HASH_METHOD"])


def normalize_email(email: str) -> str:
    return (email or "").strip().lower()


def create_user(email: str, name: str, password: str, *, is_instance_admin: bool = False) -> User:
    user = User(
        email=normalize_email(email),
        name=name.strip(),
        password_hash=hash_password(password),
        is_instance_admin=is_instance_admin,
    )
    db.session.add(user)
    db.session.flush()
    return user


def end_sessions(user: User) -> None:
    """Sign the user's browser sessions out, everywhere: their session generation moves on, so no cookie signed in
    before now signs anyone in again (`User.get_id`, checked by the user loader). For sign-out, and for a password
    change when there is one."""
    user.session_epoch = User.session_epoch + 1
    db.session.flush()


def find_user_by_email(email: str) -> User | None:
    return db.session.scalar(select(User).where(User.email == normalize_email(email)))


def authenticate(email: str, password: str, remote_addr: str | None) -> User | None:
    """Check a password. Too many recent failures for this email *from this address* refuse even a correct
    password (`login_throttle`); the same email from another address is not affected. When the counters cannot be
    reached the password is not checked at all (`login_throttle.ThrottleUnavailable`, 503)."""
    email = normalize_email(email)
    wait = login_throttle.address_retry_after(remote_addr)
    if wait is not None:
        minutes = max(1, math.ceil(wait / 60))
        raise TooManyRequests(
            "Too many failed sign-in attempts from this network. Try again in "
            f"{minutes} minute{'s' if minutes != 1 else ''}.",
            retry_after=wait,
        )
    wait = login_throttle.take_attempt(email, remote_addr)
    if wait is not None:
        minutes = max(1, math.ceil(wait / 60))
        error = TooManyRequests(
            "Too many failed sign-in attempts. Try again in "
            f"{minutes} minute{'s' if minutes != 1 else ''}, or sign in from another device.",
            retry_after=wait,
        )
        raise error
    user = find_user_by_email(email)
    if user is None:
        check_password_hash(_DUMMY_HASH, password)
    elif check_password_hash(user.password_hash, password):
        login_throttle.clear(email, remote_addr)
        db.session.execute(delete(LoginFailure).where(LoginFailure.email == email))
        return user
    login_throttle.record_address_failure(remote_addr)  # the pair's attempt was counted by `take_attempt`
    # Kept as the record of failed sign-ins (who tried, from where); throttling itself reads `login_throttle`.
    db.session.add(LoginFailure(email=email, remote_addr=remote_addr))
    return None


def safe_next(target: str | None, default: str = "/") -> str:
    """Allow only same-site relative paths after sign-in; everything else falls back to the default."""
    if not target or not isinstance(target, str):
        return default
    target = target.strip()
    if any(ch in target for ch in ("\\", "\r", "\n", "\t")) or any(ord(ch) < 32 for ch in target):
        return default
    if not target.startswith("/") or target.startswith("//"):
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return default
    return target


def _hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_api_key(user: User, name: str) -> tuple[ApiKey, str]:
    """Create a personal API key; the plain token is returned once and never stored."""
    token = API_KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        user_id=user.id,
        name=name.strip() or "API key",
        token_hash=_hash_token(token),
        token_prefix=token[:10],
    )
    db.session.add(key)
    db.session.flush()
    return key, token


def user_for_api_key(token: str) -> User | None:
    if not token or not token.startswith(API_KEY_PREFIX):
        return None
    key = db.session.scalar(select(ApiKey).where(ApiKey.token_hash == _hash_token(token)))
    if key is None or key.revoked_at is not None:
        return None
    now = utcnow()
    if key.last_used_at is None or as_utc(key.last_used_at) < now - API_KEY_TOUCH_INTERVAL:
        key.last_used_at = now
    return key.user


def revoke_api_key(user: User, key_id: uuid.UUID) -> ApiKey:
    key = db.session.get(ApiKey, key_id)
    if key is None or key.user_id != user.id:
        raise NotFound("API key not found")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
    return key


def list_api_keys(user: User) -> list[ApiKey]:
    return list(
        db.session.scalars(select(ApiKey).where(ApiKey.user_id == user.id).order_by(ApiKey.created_at.desc()))
    )
