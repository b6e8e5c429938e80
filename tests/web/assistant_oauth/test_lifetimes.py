"""The lifetimes of what the assistants' authorization server issues are settings: checked when the configuration is
read (a bad one stops the app with a message naming it), and used by the token and device doors."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from app.config import load_config
from app.models.assistants import AssistantDeviceCode, AssistantToken
from app.models.base import as_utc
from tests.services.gateway import test_gateway
from tests.web.assistant_oauth.flow import RESOURCE, register, sign_in_assistant

world = test_gateway.world
NAMES = (
    "SWITCHBOARD_ASSISTANT_ACCESS_TOKEN_SECONDS",
    "SWITCHBOARD_ASSISTANT_REFRESH_TOKEN_SECONDS",
    "SWITCHBOARD_ASSISTANT_DEVICE_CODE_SECONDS",
)


def lifetimes(monkeypatch, tmp_path, **env: str) -> tuple[int, int, int]:
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = load_config(str(tmp_path))
    return (
        config["ASSISTANT_ACCESS_TOKEN_SECONDS"],
        config["ASSISTANT_REFRESH_TOKEN_SECONDS"],
        config["ASSISTANT_DEVICE_CODE_SECONDS"],
    )


def test_the_defaults_and_settings(monkeypatch, tmp_path):
    assert lifetimes(monkeypatch, tmp_path) == (900, 30 * 86400, 600)
    assert lifetimes(
        monkeypatch,
        tmp_path,
        SWITCHBOARD_ASSISTANT_ACCESS_TOKEN_SECONDS="300",
        SWITCHBOARD_ASSISTANT_REFRESH_TOKEN_SECONDS=" 86400 ",
        SWITCHBOARD_ASSISTANT_DEVICE_CODE_SECONDS="",
    ) == (300, 86400, 600)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"SWITCHBOARD_ASSISTANT_ACCESS_TOKEN_SECONDS": "15m"},
            "SWITCHBOARD_ASSISTANT_ACCESS_TOKEN_SECONDS: expected a whole number of seconds from 60 to 86400, "
            "got '15m'",
        ),
        (
            {"SWITCHBOARD_ASSISTANT_ACCESS_TOKEN_SECONDS": "0"},
            "SWITCHBOARD_ASSISTANT_ACCESS_TOKEN_SECONDS: expected a whole number of seconds from 60 to 86400, got '0'",
        ),
        (
            {"SWITCHBOARD_ASSISTANT_DEVICE_CODE_SECONDS": "7200"},
            "SWITCHBOARD_ASSISTANT_DEVICE_CODE_SECONDS: expected a whole number of seconds from 60 to 3600, "
            "got '7200'",
        ),
        (
            {
                "SWITCHBOARD_ASSISTANT_ACCESS_TOKEN_SECONDS": "7200",
                "SWITCHBOARD_ASSISTANT_REFRESH_TOKEN_SECONDS": "3600",
            },
            "SWITCHBOARD_ASSISTANT_REFRESH_TOKEN_SECONDS: must be longer than "
            "SWITCHBOARD_ASSISTANT_ACCESS_TOKEN_SECONDS (7200), got 3600",
        ),
    ],
)
def test_a_bad_lifetime_stops_the_configuration_with_its_name(monkeypatch, tmp_path, env, message):
    with pytest.raises(ValueError) as refused:
        lifetimes(monkeypatch, tmp_path, **env)
    assert str(refused.value) == message


def test_the_doors_use_the_settings(db, world, app):
    app.config.update(
        ASSISTANT_ACCESS_TOKEN_SECONDS=120,
        ASSISTANT_REFRESH_TOKEN_SECONDS=7200,
        ASSISTANT_DEVICE_CODE_SECONDS=90,
    )
    try:
        _client_id, tokens = sign_in_assistant(world.client, world.company.id)
        assert tokens["expires_in"] == 120
        row = db.session.scalars(select(AssistantToken)).one()
        assert as_utc(row.refresh_expires_at) - as_utc(row.access_expires_at) == timedelta(seconds=7200 - 120)
        client_id = register(
            world.client, name="Codex CLI", grant_types=["urn:ietf:params:oauth:grant-type:device_code"]
        )["client_id"]
        started = app.test_client().post(
            "/device_authorization", data={"client_id": client_id, "resource": RESOURCE}
        )
        assert started.status_code == 200 and started.json["expires_in"] == 90
        device = db.session.scalars(select(AssistantDeviceCode)).one()
        # Both stamped in the one request: the code waits the setting's 90 s, not the default 600 s.
        assert 85 <= (as_utc(device.expires_at) - as_utc(device.created_at)).total_seconds() <= 90
    finally:
        app.config.update(
            ASSISTANT_ACCESS_TOKEN_SECONDS=900,
            ASSISTANT_REFRESH_TOKEN_SECONDS=30 * 86400,
            ASSISTANT_DEVICE_CODE_SECONDS=600,
        )
