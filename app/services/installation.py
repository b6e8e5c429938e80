"""Settings every process of one installation must share: the keys (issue 31 item 5).

Instances that each generated their own `SECRET_KEY` refuse each other's sessions and run tokens, and ones with other
encryption keys cannot read each other's credentials, while each looks healthy. So the database keeps a fingerprint of
each key (an HMAC keyed by the key over a fixed label: it proves equality and reveals nothing) and a process whose keys
do not match refuses to serve, naming the setting:

- The first process to check an installation that has none records its own (`record_missing`).
- `SECRET_KEY` and the run tokens' instance id must be equal. The encryption setting is a list (the first key
  encrypts, the others still decrypt: `secrets_box`), so it agrees when this process can read what the installation
  encrypts (the installation's first key is among this process's keys) and the installation can read what this process
  encrypts (this process's first key is among the installation's). That is what lets a rotation roll out instance by
  instance; `switchboard keys adopt` records a new list (README "Changing keys").
- Keys generated into the instance folder are refused on any database but the embedded SQLite one: no other instance
  shares that folder.

Checked at app start (`create_app`), by the CLI commands that use the database, and on a serving process's first
request once its schema is current (`app/web/serving_state.py`); `/readyz` reports it.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from flask import Flask, current_app
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from app.extensions import db
from app.models.base import utcnow
from app.models.installation import InstallationSetting

SECRET_KEY = "SECRET_KEY"  # noqa: S105 (a setting's name)
ENCRYPTION_KEY = "SWITCHBOARD_ENCRYPTION_KEY"
INSTANCE_ID = "SWITCHBOARD_INSTANCE_ID"
_AGREED_KEY = "switchboard_installation_agreed"
_CONFIG_NAMES = {SECRET_KEY: "SECRET_KEY", ENCRYPTION_KEY: "ENCRYPTION_KEY"}

_MESSAGES = {
    SECRET_KEY: "SECRET_KEY differs from this installation's: this instance would refuse the sessions and run tokens "
    "the other instances sign. Give every instance the same SECRET_KEY.",
    INSTANCE_ID: "SWITCHBOARD_INSTANCE_ID differs from this installation's: the other instances would refuse the run "
    "tokens this one signs. Set it alike on every instance (or on none).",
}
_CANNOT_READ = (
    "SWITCHBOARD_ENCRYPTION_KEY differs from this installation's: the installation encrypts credentials with a key "
    "this instance does not have, so it could not read them."
)
_CANNOT_BE_READ = (
    "SWITCHBOARD_ENCRYPTION_KEY differs from this installation's: this instance would encrypt credentials with a key "
    "the installation does not accept, so the other instances could not read them."
)
_SAME_KEYS = 'Give every instance the same keys; to change them, see the README\'s "Changing keys".'


class InstallationMismatch(RuntimeError):
    """This process's keys do not match its installation's; `problems` names each setting, one sentence each."""

    def __init__(self, problems: list[str]):
        super().__init__(
            "This process does not match its installation:\n" + "\n".join(f"- {p}" for p in problems)
        )
        self.problems = problems


@dataclass(frozen=True)
class Verdict:
    problems: list[str]

    @property
    def agreed(self) -> bool:
        return not self.problems


def fingerprint(name: str, value: str) -> str:
    return hmac.new(value.encode(), f"switchboard-installation:{name}".encode(), hashlib.sha256).hexdigest()


def own_fingerprints(config: dict) -> dict[str, list[str]]:
    """This process's fingerprints per setting; the first of a list is the key in use."""
    keys = [k.strip() for k in str(config["ENCRYPTION_KEY"]).split(",") if k.strip()]
    return {
        SECRET_KEY: [fingerprint(SECRET_KEY, str(config["SECRET_KEY"]))],
        ENCRYPTION_KEY: [fingerprint(ENCRYPTION_KEY, key) for key in keys],
        # Unset, the id is derived from SECRET_KEY (compared above): record that it is derived, not the derived id.
        INSTANCE_ID: [fingerprint(INSTANCE_ID, str(config.get(INSTANCE_ID) or "(derived from SECRET_KEY)"))],
    }


def generated_key_problems(config: dict) -> list[str]:
    """Keys this process generated into its instance folder, which only the embedded SQLite setup may use."""
    if str(config["SQLALCHEMY_DATABASE_URI"]).startswith("sqlite"):
        return []
    generated = config.get("GENERATED_KEYS") or {}
    return [
        f"{name} is not set: a key generated into the instance folder serves only the embedded SQLite setup. On a "
        "server database every instance needs the same SECRET_KEY and SWITCHBOARD_ENCRYPTION_KEY."
        for name, config_name in _CONFIG_NAMES.items()
        if config_name in generated and config.get(config_name) == generated[config_name]
    ]


def _problem(name: str, recorded: list[str], own: list[str]) -> str | None:
    if name != ENCRYPTION_KEY:
        return None if recorded == own else _MESSAGES[name]
    if recorded[0] not in own:
        return f"{_CANNOT_READ} {_SAME_KEYS}"
    if own[0] not in recorded:
        return f"{_CANNOT_BE_READ} {_SAME_KEYS}"
    return None


def recorded_fingerprints() -> dict[str, list[str]]:
    return {row.name: row.fingerprints.split() for row in db.session.scalars(select(InstallationSetting))}


def record_missing(own: dict[str, list[str]]) -> None:
    """Record the settings the installation has no fingerprints for yet; flushes. Of several processes doing this at
    once on an empty installation one row wins each setting, and the others then compare against it."""
    recorded = recorded_fingerprints()
    for name, prints in own.items():
        if name in recorded:
            continue
        try:
            with db.session.begin_nested():
                db.session.add(
                    InstallationSetting(name=name, fingerprints=" ".join(prints), recorded_at=utcnow())
                )
        except IntegrityError:
            pass  # another process recorded it first


def verify(app: Flask | None = None) -> Verdict:
    """Compare this process's keys with the installation's, recording them on an empty installation; commits.

    Runs outside any request (app start, a CLI command, before a serving process's first request is handled), in its
    own transaction. Raises SQLAlchemy's error when the tables are missing (the schema is behind: check again later).
    """
    config = (app or current_app).config
    problems = generated_key_problems(config)
    if problems:
        return Verdict(problems)
    own = own_fingerprints(config)
    try:
        record_missing(own)
        db.session.commit()
        recorded = recorded_fingerprints()
        db.session.rollback()
    except Exception:
        db.session.rollback()
        raise
    found = [_problem(name, recorded[name], prints) for name, prints in own.items() if name in recorded]
    return Verdict([problem for problem in found if problem])


def check_at_start(app: Flask) -> None:
    """The app factory's check: raise `InstallationMismatch` when this process must not serve. A database without the
    tables yet is checked again before the first request once `db upgrade` has run (`ensure_agreed`)."""
    if not (app.config.get("INSTALLATION_CHECK") and app.config.get("INSTALLATION_CHECK_AT_START")):
        return
    problems = generated_key_problems(app.config)
    if problems:
        raise InstallationMismatch(problems)
    with app.app_context():
        try:
            verdict = verify(app)
        except (OperationalError, ProgrammingError):
            return
    if not verdict.agreed:
        raise InstallationMismatch(verdict.problems)
    app.extensions[_AGREED_KEY] = True


def ensure_agreed() -> list[str]:
    """For a serving process, per request until agreed: the problems that stop it serving (empty: none). Agreement is
    remembered (no query afterwards); a mismatch is looked at again, so `switchboard keys adopt` takes effect."""
    app = current_app
    if not app.config.get("INSTALLATION_CHECK") or app.extensions.get(_AGREED_KEY):
        return []
    try:
        verdict = verify()
    except (OperationalError, ProgrammingError):
        return ["The installation's settings could not be read."]
    if verdict.agreed:
        app.extensions[_AGREED_KEY] = True
    return verdict.problems


def status() -> str:
    """For `/readyz`: "ok", "not checked" (this app does not check), or the problems, one sentence each."""
    if not current_app.config.get("INSTALLATION_CHECK"):
        return "not checked"
    problems = ensure_agreed()
    return " ".join(problems) if problems else "ok"


def adopt() -> list[str]:
    """Record this process's keys as the installation's (a deliberate change of keys); flushes. Refused (returned
    problems, nothing written) when this process could not read the credentials the installation has encrypted."""
    config = current_app.config
    problems = generated_key_problems(config)
    if problems:
        return problems
    own = own_fingerprints(config)
    recorded = recorded_fingerprints()
    if ENCRYPTION_KEY in recorded and recorded[ENCRYPTION_KEY][0] not in own[ENCRYPTION_KEY]:
        return [
            f"{_CANNOT_READ} Keep the installation's current key in SWITCHBOARD_ENCRYPTION_KEY (after the new one) "
            "until every credential was written again with the new key."
        ]
    now = utcnow()
    for name, prints in own.items():
        row = db.session.get(InstallationSetting, name)
        if row is None:
            db.session.add(InstallationSetting(name=name, fingerprints=" ".join(prints), recorded_at=now))
        else:
            row.fingerprints = " ".join(prints)
            row.recorded_at = now
    db.session.flush()
    return []
