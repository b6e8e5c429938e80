"""Settings that must agree (issue 31 item 5): every process of one installation has the same keys.

The database keeps fingerprints of the keys (never the keys). The first process on an empty installation records
them; a process with another SECRET_KEY, encryption key or run-token instance id refuses to start, naming the
setting: the app factory raises (gunicorn exits), `switchboard worker` exits 2, and a process that started before the
schema had its tables answers 503 and reports it on `/readyz`. An encryption key rotation rolls out instance by
instance, and keys generated into the instance folder are refused on a server database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from flask_migrate import upgrade
from sqlalchemy import select

from app.services import installation
from app.services.installation import InstallationMismatch
from tests.conftest import TEST_CONFIG
from tests.services.gateway.test_cancellation import GUNICORN, PROJECT_ROOT, _free_port
from tests.system.test_migrations import app_on, fresh_database

# The `switchboard` command, run from this checkout (its console script may point at another one).
SWITCHBOARD = [sys.executable, "-c", "from app.cli import main; main()"]
OLD = Fernet.generate_key().decode()
NEW = Fernet.generate_key().decode()

DIFFERENT_SECRET = (
    "This process does not match its installation:\n"
    "- SECRET_KEY differs from this installation's: this instance would refuse the sessions and run tokens the other "
    "instances sign. Give every instance the same SECRET_KEY."
)
CANNOT_READ = (
    "SWITCHBOARD_ENCRYPTION_KEY differs from this installation's: the installation encrypts credentials with a key "
    "this instance does not have, so it could not read them. Give every instance the same keys; to change them, see "
    'the README\'s "Changing keys".'
)
CANNOT_BE_READ = (
    "SWITCHBOARD_ENCRYPTION_KEY differs from this installation's: this instance would encrypt credentials with a key "
    "the installation does not accept, so the other instances could not read them. Give every instance the same "
    'keys; to change them, see the README\'s "Changing keys".'
)


def _config(url: str, **keys: str) -> dict:
    return {**TEST_CONFIG, "SQLALCHEMY_DATABASE_URI": url, "INSTALLATION_CHECK": True, **keys}


@pytest.fixture
def migrated_url(tmp_path):
    with fresh_database(tmp_path) as url:
        with app_on(url):
            upgrade()
        yield url


def _start(url: str, **keys: str):
    from app import create_app
    from app.extensions import db

    application = create_app(_config(url, **keys))
    with application.app_context():
        db.session.remove()
        db.engine.dispose()
    return application


def _mismatch(url: str, **keys: str) -> str:
    with pytest.raises(InstallationMismatch) as refused:
        _start(url, **keys)
    return str(refused.value)


def test_the_first_process_records_fingerprints_and_one_with_another_secret_key_refuses_to_start(
    migrated_url,
):
    from app.extensions import db
    from app.models import InstallationSetting

    _start(migrated_url, SECRET_KEY="k" * 32, ENCRYPTION_KEY=OLD)
    _start(migrated_url, SECRET_KEY="k" * 32, ENCRYPTION_KEY=OLD)  # a second instance alike starts
    assert _mismatch(migrated_url, SECRET_KEY="other" * 8, ENCRYPTION_KEY=OLD) == DIFFERENT_SECRET
    with app_on(migrated_url):
        rows = {row.name: row.fingerprints for row in db.session.scalars(select(InstallationSetting))}
    assert set(rows) == {"SECRET_KEY", "SWITCHBOARD_ENCRYPTION_KEY", "SWITCHBOARD_INSTANCE_ID"}
    stored = " ".join(rows.values())
    assert "k" * 32 not in stored and OLD not in stored  # fingerprints, never the keys


def test_another_encryption_key_or_instance_id_refuses_to_start(migrated_url):
    _start(migrated_url, ENCRYPTION_KEY=OLD)
    assert _mismatch(migrated_url, ENCRYPTION_KEY=NEW) == (
        f"This process does not match its installation:\n- {CANNOT_READ}"
    )
    assert _mismatch(migrated_url, ENCRYPTION_KEY=OLD, SWITCHBOARD_INSTANCE_ID="elsewhere") == (
        "This process does not match its installation:\n"
        "- SWITCHBOARD_INSTANCE_ID differs from this installation's: the other instances would refuse the run tokens "
        "this one signs. Set it alike on every instance (or on none)."
    )


def test_an_encryption_key_rotation_rolls_out_instance_by_instance(migrated_url):
    """README "Changing keys": add the new key after the old one everywhere, adopt "new,old", roll it out, and later
    drop the old key and adopt again. At every step the instances that may still run read each other's credentials,
    and at none can an instance start that could not."""
    from app.extensions import db

    _start(migrated_url, ENCRYPTION_KEY=OLD)
    _start(migrated_url, ENCRYPTION_KEY=f"{OLD},{NEW}")  # 1. the new key decrypts only
    # Encrypting with the new key before the installation accepts it would write what old-only instances cannot read.
    assert _mismatch(migrated_url, ENCRYPTION_KEY=f"{NEW},{OLD}").endswith(CANNOT_BE_READ)

    adopter = _start(migrated_url, ENCRYPTION_KEY=f"{OLD},{NEW}")
    adopter.config["ENCRYPTION_KEY"] = (
        f"{NEW},{OLD}"  # 2. `switchboard keys adopt` from a process with the new list
    )
    with adopter.app_context():
        assert installation.adopt() == []
        db.session.commit()
        db.session.remove()
        db.engine.dispose()
    _start(migrated_url, ENCRYPTION_KEY=f"{NEW},{OLD}")
    _start(migrated_url, ENCRYPTION_KEY=f"{OLD},{NEW}")  # not yet restarted: still reads and is read
    assert _mismatch(migrated_url, ENCRYPTION_KEY=OLD).endswith(
        CANNOT_READ
    )  # an old-only instance cannot return

    with adopter.app_context():  # 3. the old key dropped once every credential was written again
        adopter.config["ENCRYPTION_KEY"] = NEW
        assert installation.adopt() == []
        db.session.commit()
        adopter.config["ENCRYPTION_KEY"] = (
            OLD  # adopting a list that cannot read the installation's key is refused
        )
        assert installation.adopt() == [
            "SWITCHBOARD_ENCRYPTION_KEY differs from this installation's: the installation encrypts credentials with "
            "a key this instance does not have, so it could not read them. Keep the installation's current key in "
            "SWITCHBOARD_ENCRYPTION_KEY (after the new one) until every credential was written again with the new "
            "key."
        ]
        db.session.rollback()
        db.session.remove()
        db.engine.dispose()
    _start(migrated_url, ENCRYPTION_KEY=NEW)
    assert _mismatch(migrated_url, ENCRYPTION_KEY=f"{OLD},{NEW}").endswith(CANNOT_BE_READ)


def test_generated_keys_are_refused_on_a_server_database_and_kept_for_the_embedded_one(tmp_path, monkeypatch):
    """No connection is needed to refuse: the server named here does not exist."""
    from app import create_app

    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.delenv("SWITCHBOARD_ENCRYPTION_KEY", raising=False)
    monkeypatch.setenv("SWITCHBOARD_INSTANCE_PATH", str(tmp_path / "instance"))
    generated = {k: v for k, v in TEST_CONFIG.items() if k not in {"SECRET_KEY", "ENCRYPTION_KEY"}}
    nowhere = "postgresql+psycopg://nobody@127.0.0.1:9/nowhere"
    with pytest.raises(InstallationMismatch) as refused:
        create_app({**generated, "INSTALLATION_CHECK": True, "SQLALCHEMY_DATABASE_URI": nowhere})
    assert str(refused.value) == (
        "This process does not match its installation:\n"
        "- SECRET_KEY is not set: a key generated into the instance folder serves only the embedded SQLite setup. On "
        "a server database every instance needs the same SECRET_KEY and SWITCHBOARD_ENCRYPTION_KEY.\n"
        "- SWITCHBOARD_ENCRYPTION_KEY is not set: a key generated into the instance folder serves only the embedded "
        "SQLite setup. On a server database every instance needs the same SECRET_KEY and SWITCHBOARD_ENCRYPTION_KEY."
    )
    embedded = f"sqlite:///{tmp_path / 'embedded.db'}"
    application = create_app({**generated, "INSTALLATION_CHECK": True, "SQLALCHEMY_DATABASE_URI": embedded})
    assert application.config["GENERATED_KEYS"].keys() == {"SECRET_KEY", "ENCRYPTION_KEY"}


def test_a_process_started_before_the_tables_refuses_requests_once_it_finds_other_keys(tmp_path):
    from app import create_app
    from app.extensions import db

    with fresh_database(tmp_path) as url:
        early = create_app(_config(url, SECRET_KEY="early" * 8))  # no tables yet: nothing to compare
        with app_on(url):
            upgrade()
        _start(url, SECRET_KEY="k" * 32)  # the upgraded instances record theirs
        client = early.test_client()
        page = client.get("/api/me", headers={"Accept": "application/json"})
        assert page.status_code == 503
        assert page.json == {"error": DIFFERENT_SECRET.split("- ", 1)[1]}
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json["status"] == "not ready"
        assert ready.json["settings"] == DIFFERENT_SECRET.split("- ", 1)[1]
        with early.app_context():
            db.session.remove()
            db.engine.dispose()


def _env(app, tmp_path: Path, secret: str, name: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": app.config["SQLALCHEMY_DATABASE_URI"],
        "SECRET_KEY": secret,
        "SWITCHBOARD_ENCRYPTION_KEY": TEST_CONFIG["ENCRYPTION_KEY"],
        "SWITCHBOARD_INSTANCE_PATH": str(tmp_path / name),
        "SWITCHBOARD_CATALOG_INGEST_ON_START": "0",
    }


def test_a_second_server_process_with_another_secret_key_exits_and_a_worker_refuses(app, db, tmp_path):
    """Real processes on the test database: `switchboard keys check` records the installation's keys (as the first
    instance's start does), a gunicorn server with another SECRET_KEY fails to boot with the message, and so does
    `switchboard worker`."""
    first = subprocess.run(
        [*SWITCHBOARD, "keys", "check"],
        cwd=PROJECT_ROOT,
        env=_env(app, tmp_path, "first-secret" * 3, "first"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (first.returncode, first.stdout) == (0, "The keys match this installation's.\n"), first.stderr
    env = {
        **_env(app, tmp_path, "second-secret" * 3, "second"),
        "SWITCHBOARD_BIND": f"127.0.0.1:{_free_port()}",
        "WEB_CONCURRENCY": "1",
    }
    server = subprocess.run(
        [str(GUNICORN), "-c", "gunicorn.conf.py", "wsgi:app"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert server.returncode != 0
    assert DIFFERENT_SECRET in server.stderr
    worker = subprocess.run(
        [*SWITCHBOARD, "worker", "--once"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (worker.returncode, worker.stdout, worker.stderr) == (2, "", DIFFERENT_SECRET + "\n")
