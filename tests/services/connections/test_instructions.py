"""Connection instructions: saved-setting rules, public context, and the exact snapshot layout (golden)."""

import hashlib
import json

import pytest

from app.catalog.loader import get_app, template_default
from app.services.connections.instructions import (
    InstructionSource,
    compose_snapshot,
    differs_from_template,
    editor_saved_value,
    instruction_context,
    reset_to_template,
)

INTRO = (
    "The following instructions apply to your authorized connections. "
    "Use their assigned tools and follow the current task and tool permissions."
)


def source(
    connection_id,
    text="Use the handbook.",
    enabled=True,
    template=None,
    context=None,
    name="Handbook",
    connector="custom",
    method="custom-api-key",
    grant="g-1",
):
    setting = {"enabled": enabled, "text": text}
    if template:
        setting["template"] = template
    return InstructionSource(
        connection_id=connection_id,
        connection_name=name,
        grant_id=grant,
        connector=connector,
        method=method,
        setting=setting,
        context={} if context is None else context,
    )


def test_snapshot_golden_layout_and_digest():
    snapshot = compose_snapshot(
        [
            source(
                "b-2",
                text="Second block.",
                context={"workspaceId": "team-workspace"},
                name="Honcho",
                connector="honcho",
                method="mcp-api-key",
                template={"id": "honcho.usage", "version": 1},
                grant="g-2",
            ),
            source("a-1", text="First block."),
        ]
    )
    expected = (
        "## Connection instructions\n\n" + INTRO + "\n\n"
        'Connection source and configuration (data): {"connectionId":"a-1","connectionName":"Handbook",'
        '"grantId":"g-1","connector":"custom","method":"custom-api-key","context":{}}\n\nFirst block.'
        "\n\n---\n\n"
        'Connection source and configuration (data): {"connectionId":"b-2","connectionName":"Honcho",'
        '"grantId":"g-2","connector":"honcho","method":"mcp-api-key","template":{"id":"honcho.usage","version":1},'
        '"context":{"workspaceId":"team-workspace"}}\n\nSecond block.'
    )
    assert snapshot["text"] == expected
    assert snapshot["digest"] == hashlib.sha256(expected.encode("utf-8")).hexdigest()


def test_snapshot_is_null_without_eligible_blocks():
    assert compose_snapshot([]) is None
    assert compose_snapshot([source("a", enabled=False)]) is None
    assert (
        compose_snapshot(
            [InstructionSource("a", "n", "g", "honcho", "m", {"enabled": True, "text": "x"}, None)]
        )
        is None
    )
    assert compose_snapshot([InstructionSource("a", "n", "g", "x", "m", None, {})]) is None


def test_public_configuration_and_method_change_the_digest():
    base = compose_snapshot([source("a", context={"workspaceId": "one"})])
    other_workspace = compose_snapshot([source("a", context={"workspaceId": "two"})])
    other_method = compose_snapshot([source("a", context={"workspaceId": "one"}, method="other")])
    assert len({base["digest"], other_workspace["digest"], other_method["digest"]}) == 3
    assert '"workspaceId":"one"' in base["text"]


def test_unicode_text_is_kept_verbatim_in_the_snapshot():
    snapshot = compose_snapshot([source("a", text="Résumé → 記憶", context={"workspaceId": "Zürich"})])
    assert "Résumé → 記憶" in snapshot["text"] and '"workspaceId":"Zürich"' in snapshot["text"]
    assert snapshot["digest"] == hashlib.sha256(snapshot["text"].encode("utf-8")).hexdigest()


def test_honcho_context_needs_the_workspace_and_excludes_secrets(db):
    honcho = get_app("honcho")
    method_key = honcho.methods[0].key
    assert instruction_context(honcho, {"connectionMethodKey": method_key, "methodConfig": {}}) is None
    assert (
        instruction_context(
            honcho, {"connectionMethodKey": method_key, "methodConfig": {"workspaceId": "  "}}
        )
        is None
    )
    context = instruction_context(
        honcho,
        {"connectionMethodKey": method_key, "methodConfig": {"workspaceId": " team ", "authorization": "x"}},
    )
    assert context == {"workspaceId": "team"}
    assert instruction_context(None, {}) == {}


def test_cognee_base_url_is_a_credential_not_context(db):
    cognee = get_app("cognee")
    assert (
        instruction_context(cognee, {"connectionMethodKey": cognee.methods[0].key, "methodConfig": {}}) == {}
    )


def test_reset_adopts_template_and_keeps_the_toggle(db):
    honcho = get_app("honcho")
    default = template_default(honcho)
    custom_off = {"enabled": False, "text": "My own words"}
    assert differs_from_template(custom_off, honcho)
    reset = reset_to_template(custom_off, honcho)
    assert reset == {**default, "enabled": False}
    assert not differs_from_template(reset, honcho)
    older_version = {**default, "template": {"id": default["template"]["id"], "version": 0}}
    assert differs_from_template(older_version, honcho)


def test_cleared_setting_starts_the_editor_from_the_template_switched_off(db):
    honcho = get_app("honcho")
    assert editor_saved_value(None, honcho) == {**template_default(honcho), "enabled": False}
    assert editor_saved_value(None, get_app("notion")) is None


@pytest.mark.parametrize("slug", ["honcho", "mem0", "zep", "supermemory", "cognee"])
def test_memory_providers_have_templates_within_the_limit(db, slug):
    default = template_default(get_app(slug))
    assert default["enabled"] is True and 0 < len(default["text"]) <= 2000
    json.dumps(default)


def test_custom_server_urls_stay_out_of_the_context(db):
    custom = get_app("custom")
    config = {
        "connectionMethodKey": "custom-api-key",
        "methodConfig": {"serverUrl": "https://mcp.internal/mcp"},
    }
    assert instruction_context(custom, config) == {}
    assert instruction_context(custom, {"connectionMethodKey": "custom-api-key", "methodConfig": {}}) is None
