"""Encryption at rest for credentials (Fernet; several comma-separated keys allow rotation, the first encrypts)."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from flask import current_app


def _box() -> MultiFernet:
    keys = [k.strip() for k in str(current_app.config["ENCRYPTION_KEY"]).split(",") if k.strip()]
    return MultiFernet([Fernet(k.encode()) for k in keys])


def encrypt(value: str) -> str:
    return _box().encrypt(value.encode("utf-8")).decode("ascii")


def decrypt(token: str) -> str:
    try:
        return _box().decrypt(token.encode("ascii")).decode("utf-8")
    except InvalidToken as err:
        raise ValueError("A stored credential could not be decrypted with the configured keys") from err
