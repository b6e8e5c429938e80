"""The app catalog: definition files, their validation, ingestion into the cached catalog, the CLI and readers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.catalog.loader import (
    DEFINITIONS_DIR,
    CatalogError,
    content_hash,
    get_app,
    get_method,
    ingest_definitions,
    list_apps,
    load_definition_files,
    logo_url,
    template_default,
)
from app.catalog.schema import STATIC_DIR, TEMPLATE_TEXT_MAX_LENGTH, AppDefinition
from app.models.connections import CatalogApp
from tests.conftest import count_statements

MEMORY_PROVIDERS = ("honcho", "mem0", "zep", "supermemory", "cognee")
WITHOUT_TEMPLATE = ("github", "notion", "linear", "slack", "custom")
SHIPPED = {path.stem for path in DEFINITIONS_DIR.glob("*.json")}


@pytest.fixture
def definitions_copy(tmp_path) -> Path:
    target = tmp_path / "definitions"
    shutil.copytree(DEFINITIONS_DIR, target)
    return target


def _read(directory: Path, slug: str) -> dict:
    return json.loads((directory / f"{slug}.json").read_text(encoding="utf-8"))


def _write(directory: Path, slug: str, data: dict) -> None:
    (directory / f"{slug}.json").write_text(json.dumps(data, indent=2), encoding="utf-8")


def _rows(db) -> dict[str, CatalogApp]:
    db.session.expire_all()
    return {row.slug: row for row in db.session.scalars(select(CatalogApp))}


# --- the shipped definitions ----------------------------------------------------------------------------------


def test_every_shipped_definition_validates():
    definitions = load_definition_files()
    assert {d.slug for d in definitions} == SHIPPED
    assert {*MEMORY_PROVIDERS, *WITHOUT_TEMPLATE} <= SHIPPED
    for definition in definitions:
        assert definition.methods, definition.slug
        for url in filter(None, (definition.branding.logoUrl, definition.branding.darkLogoUrl)):
            assert (STATIC_DIR / url.removeprefix("/static/")).is_file()


@pytest.mark.parametrize("slug", MEMORY_PROVIDERS)
def test_memory_providers_ship_a_template(slug):
    data = _read(DEFINITIONS_DIR, slug)
    template = data["agentInstructions"]
    assert template["id"] == f"{slug}.usage"
    assert template["version"] == 1
    assert 0 < len(template["text"]) <= TEMPLATE_TEXT_MAX_LENGTH
    assert template["text"] == template["text"].strip()
    assert data["categories"] == ["memory", "ai"]


@pytest.mark.parametrize("slug", WITHOUT_TEMPLATE)
def test_other_apps_have_no_template(slug):
    assert "agentInstructions" not in _read(DEFINITIONS_DIR, slug)


def test_honcho_workspace_is_required_public_and_has_a_placeholder():
    honcho = next(d for d in load_definition_files() if d.slug == "honcho")
    method = honcho.method("mcp-api-key")
    assert method.auth == "api_key"
    assert method.defaults.serverUrl == "https://mcp.honcho.dev"
    (workspace,) = method.tenantFields
    assert workspace.key == "workspaceId"
    assert workspace.label == "Honcho workspace"
    assert workspace.type == "text"
    assert workspace.required and not workspace.secret and workspace.is_public
    assert workspace.placeholder == "Workspace ID"
    assert workspace.validation.maxLength == 512
    assert [f.key for f in method.public_fields] == ["workspaceId"]
    (credential,) = method.credentialFields
    assert credential.key == "authorization" and credential.secret and credential.type == "password"
    assert method.keyPlacement.model_dump() == {
        "location": "header",
        "name": "Authorization",
        "prefix": "Bearer ",
    }


def test_custom_and_cognee_shapes():
    apps = {d.slug: d for d in load_definition_files()}
    custom = apps["custom"]
    assert [m.key for m in custom.methods] == ["custom-api-key", "custom-none"]
    for method in custom.methods:
        (server_url,) = method.tenantFields
        assert server_url.key == "serverUrl" and server_url.type == "url" and server_url.required
        assert method.server_url_field is server_url
    cognee = apps["cognee"].methods[0]
    base_url, api_key = cognee.credentialFields
    assert base_url.key == "COGNEE_BASE_URL" and base_url.required and not base_url.secret
    # The base URL is the MCP server address (the definition marks it; no code names the app).
    assert base_url.type == "url" and cognee.server_url_field is base_url
    assert api_key.key == "COGNEE_API_KEY" and api_key.secret
    assert cognee.keyPlacement.name == "X-Api-Key"
    # The base URL is a credential field, so it never enters the instruction context.
    assert cognee.public_fields == []


# --- ingestion into the cached catalog ------------------------------------------------------------------------


def test_session_catalog_matches_the_files(db):
    rows = _rows(db)
    assert set(rows) == SHIPPED
    honcho = rows["honcho"]
    assert honcho.agent_instructions == _read(DEFINITIONS_DIR, "honcho")["agentInstructions"]
    assert honcho.definition["agentInstructions"] == honcho.agent_instructions
    assert honcho.content_hash == content_hash(honcho.definition)
    assert rows["notion"].agent_instructions is None
    report = ingest_definitions()
    assert report == {"added": [], "updated": [], "removed": [], "unchanged": sorted(SHIPPED)}


def test_ingest_reflects_edited_and_removed_templates_exactly(db, definitions_copy, real_catalog_restored):
    honcho = _read(definitions_copy, "honcho")
    honcho["agentInstructions"]["text"] = "Use the configured Honcho workspace. Edited."
    honcho["agentInstructions"]["version"] = 2
    _write(definitions_copy, "honcho", honcho)
    mem0 = _read(definitions_copy, "mem0")
    del mem0["agentInstructions"]
    _write(definitions_copy, "mem0", mem0)
    (definitions_copy / "slack.json").unlink()

    report = ingest_definitions(definitions_copy)
    db.session.commit()

    assert report["updated"] == ["honcho", "mem0"]
    assert report["removed"] == ["slack"]
    assert report["added"] == []
    rows = _rows(db)
    assert "slack" not in rows
    assert rows["honcho"].agent_instructions == {
        "id": "honcho.usage",
        "version": 2,
        "text": "Use the configured Honcho workspace. Edited.",
    }
    assert rows["honcho"].definition["agentInstructions"] == rows["honcho"].agent_instructions
    assert rows["mem0"].agent_instructions is None
    assert rows["mem0"].definition["agentInstructions"] is None
    assert template_default(get_app("mem0")) is None
    assert template_default(get_app("honcho"))["template"] == {"id": "honcho.usage", "version": 2}
    assert get_app("slack") is None

    report = ingest_definitions()
    db.session.commit()
    assert report["added"] == ["slack"]
    assert report["updated"] == ["honcho", "mem0"]
    assert _rows(db)["mem0"].agent_instructions == _read(DEFINITIONS_DIR, "mem0")["agentInstructions"]


# --- invalid definitions --------------------------------------------------------------------------------------


def _unknown_key(d: Path) -> None:
    data = _read(d, "github")
    data["methods"][0]["colour"] = "blue"
    _write(d, "github", data)


def _long_template(d: Path) -> None:
    data = _read(d, "github")
    data["agentInstructions"] = {"id": "github.usage", "version": 1, "text": "x" * 2001}
    _write(d, "github", data)


def _no_placeholder(d: Path) -> None:
    data = _read(d, "honcho")
    del data["methods"][0]["tenantFields"][0]["placeholder"]
    _write(d, "honcho", data)


def _bad_json(d: Path) -> None:
    (d / "zep.json").write_text('{"schemaVersion": 1,', encoding="utf-8")


def _password_not_secret(d: Path) -> None:
    data = _read(d, "mem0")
    data["methods"][0]["credentialFields"][0]["secret"] = False
    _write(d, "mem0", data)


def _duplicate_method(d: Path) -> None:
    data = _read(d, "linear")
    data["methods"][1]["key"] = data["methods"][0]["key"]
    _write(d, "linear", data)


def _duplicate_field(d: Path) -> None:
    data = _read(d, "custom")
    data["methods"][0]["tenantFields"][0]["key"] = "authorization"
    _write(d, "custom", data)


def _api_key_without_placement(d: Path) -> None:
    data = _read(d, "mem0")
    del data["methods"][0]["keyPlacement"]
    _write(d, "mem0", data)


def _slug_not_file_name(d: Path) -> None:
    data = _read(d, "notion")
    data["slug"] = "notion-two"
    _write(d, "notion", data)


def _missing_logo(d: Path) -> None:
    data = _read(d, "notion")
    data["branding"]["logoUrl"] = "/static/img/apps/no-such-logo.svg"
    _write(d, "notion", data)


def _bad_grant_kind(d: Path) -> None:
    data = _read(d, "zep")
    data["methods"][0]["grantKinds"] = ["team"]
    _write(d, "zep", data)


def _two_server_urls(d: Path) -> None:
    data = _read(d, "cognee")
    data["methods"][0]["credentialFields"][1] = {
        **data["methods"][0]["credentialFields"][0],
        "key": "COGNEE_SECOND_URL",
    }
    _write(d, "cognee", data)


def _server_url_not_a_url_field(d: Path) -> None:
    data = _read(d, "cognee")
    data["methods"][0]["credentialFields"][0]["type"] = "text"
    _write(d, "cognee", data)


def _secret_server_url(d: Path) -> None:
    data = _read(d, "custom")
    data["methods"][0]["tenantFields"][0]["secret"] = True
    _write(d, "custom", data)


def _oauth_server_url_credential(d: Path) -> None:
    data = _read(d, "linear")
    method = data["methods"][0]
    assert method["auth"] == "oauth"
    method["credentialFields"] = [
        {
            "key": "baseUrl",
            "label": "Base URL",
            "type": "url",
            "serverUrl": True,
            "placeholder": "https://example.com",
        }
    ]
    _write(d, "linear", data)


@pytest.mark.parametrize(
    ("break_it", "expected"),
    [
        (
            _two_server_urls,
            "cognee.json: methods[0].credentialFields[1].serverUrl: only one field of a method can be the server URL",
        ),
        (
            _server_url_not_a_url_field,
            "cognee.json: methods[0].credentialFields[0].serverUrl: the server URL field must be a non-secret url "
            "field",
        ),
        (
            _secret_server_url,
            "custom.json: methods[0].tenantFields[0].serverUrl: the server URL field must be a non-secret url field",
        ),
        (
            _oauth_server_url_credential,
            "linear.json: methods[0].credentialFields[0].serverUrl: an OAuth method's server URL must be a tenant "
            "field",
        ),
        (_unknown_key, "github.json: methods[0].colour: unknown key"),
        (_long_template, "github.json: agentInstructions.text: at most 2000 characters"),
        (
            _no_placeholder,
            "honcho.json: methods[0].tenantFields[0].placeholder: required fields need a placeholder",
        ),
        (_bad_json, "zep.json: invalid JSON"),
        (
            _password_not_secret,
            "mem0.json: methods[0].credentialFields[0].secret: password fields must be secret",
        ),
        (_duplicate_method, "linear.json: methods[1].key: duplicate method key 'mcp-oauth'"),
        (
            _duplicate_field,
            "custom.json: methods[0].tenantFields[0].key: duplicate field key 'authorization'",
        ),
        (
            _api_key_without_placement,
            "mem0.json: methods[0].keyPlacement: api_key methods need a keyPlacement",
        ),
        (_slug_not_file_name, "notion.json: slug: must equal the file name ('notion')"),
        (_missing_logo, "notion.json: branding.logoUrl: no such file: static/img/apps/no-such-logo.svg"),
        (_bad_grant_kind, "zep.json: methods[0].grantKinds[0]: must be one of"),
    ],
)
def test_invalid_definition_is_rejected_and_nothing_is_written(db, definitions_copy, break_it, expected):
    # A valid edit elsewhere in the same directory must not be written either.
    notion = _read(definitions_copy, "notion")
    notion["description"] = "Changed in the same ingest."
    _write(definitions_copy, "notion", notion)
    break_it(definitions_copy)
    before = {slug: (row.content_hash, row.description) for slug, row in _rows(db).items()}

    with pytest.raises(CatalogError) as caught:
        ingest_definitions(definitions_copy)

    assert any(message.startswith(expected) for message in caught.value.messages), caught.value.messages
    db.session.rollback()
    assert {slug: (row.content_hash, row.description) for slug, row in _rows(db).items()} == before


def test_all_errors_are_collected(definitions_copy):
    _unknown_key(definitions_copy)
    _no_placeholder(definitions_copy)
    _bad_json(definitions_copy)
    with pytest.raises(CatalogError) as caught:
        load_definition_files(definitions_copy)
    files = {message.split(":", 1)[0] for message in caught.value.messages}
    assert files == {"github.json", "honcho.json", "zep.json"}


def test_empty_directory_is_an_error_not_a_wipe(tmp_path):
    with pytest.raises(CatalogError, match="no app definitions"):
        load_definition_files(tmp_path)


def test_template_text_is_trimmed_and_bounded():
    base = _read(DEFINITIONS_DIR, "honcho")
    base["agentInstructions"]["text"] = "  " + "y" * 2000 + "  "
    assert AppDefinition.model_validate(base).agentInstructions.text == "y" * 2000
    base["agentInstructions"]["text"] = "   "
    with pytest.raises(ValueError):
        AppDefinition.model_validate(base)


# --- the CLI --------------------------------------------------------------------------------------------------


def test_cli_ingest_and_validate_succeed_on_the_real_definitions(app, db):
    runner = app.test_cli_runner()
    result = runner.invoke(args=["catalog", "ingest", "--definitions-only"])
    assert result.exit_code == 0, result.output
    assert f"0 added, 0 updated, 0 removed, {len(SHIPPED)} unchanged" in result.output
    result = runner.invoke(args=["catalog", "validate"])
    assert result.exit_code == 0, result.output
    assert f"{len(SHIPPED)} app definition(s) are valid" in result.output


def test_cli_reports_changes(app, db, definitions_copy, real_catalog_restored):
    (definitions_copy / "slack.json").unlink()
    result = app.test_cli_runner().invoke(args=["catalog", "ingest", "--directory", str(definitions_copy)])
    assert result.exit_code == 0, result.output
    assert "1 removed" in result.output
    assert "removed: slack" in result.output
    assert "slack" not in _rows(db)


def test_cli_fails_on_an_invalid_directory_without_writing(app, db, definitions_copy):
    _no_placeholder(definitions_copy)
    (definitions_copy / "slack.json").unlink()
    runner = app.test_cli_runner()
    for command in ("ingest", "validate"):
        result = runner.invoke(args=["catalog", command, "--directory", str(definitions_copy)])
        assert result.exit_code == 1
        assert "honcho.json: methods[0].tenantFields[0].placeholder" in result.stderr
    assert "slack" in _rows(db)


# --- runtime readers ------------------------------------------------------------------------------------------


def test_readers_on_the_cached_catalog(db):
    honcho = get_app("honcho")
    assert isinstance(honcho, AppDefinition)
    assert get_app("honcho") is honcho  # memoised by (slug, content_hash)
    assert get_app("no-such-app") is None

    apps = list_apps()
    assert {a.slug for a in apps} == SHIPPED
    names = [a.name.casefold() for a in apps]
    assert names == sorted(names)

    assert template_default(honcho) == {
        "enabled": True,
        "text": honcho.agentInstructions.text,
        "template": {"id": "honcho.usage", "version": 1},
    }
    assert template_default(get_app("notion")) is None
    assert template_default(None) is None

    github = get_app("github")
    assert get_method(github, "oauth").key == "oauth"
    assert get_method(github, None).key == "mcp-key"
    assert get_method(github, "unknown").key == "mcp-key"
    assert logo_url(github) == "/static/img/apps/github.svg"
    assert logo_url(github, dark=True) == "/static/img/apps/github-dark.svg"
    assert logo_url(honcho, dark=True) == "/static/img/apps/honcho.svg"


def test_get_app_is_one_primary_key_query(db):
    db.session.expire_all()
    db.session.expunge_all()
    with count_statements(db.engine) as statements:
        assert get_app("zep").slug == "zep"
        assert len(list_apps()) == db.session.scalar(select(func.count()).select_from(CatalogApp))
    catalog_selects = [s for s in statements if "catalog_apps" in s]
    assert len(catalog_selects) == 3  # get_app, list_apps, and the count above
