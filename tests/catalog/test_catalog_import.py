"""`switchboard catalog import`: MCP Registry server.json documents (the registry's own examples, checked into
tests/fixtures/registry/, and a few of ours) become validated app definitions, are ingested, and connect to a real MCP
server; package-only servers are refused with a reason (SSE remotes: tests/services/connections/test_sse_transport.py); URLs are fetched through the outbound guard."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from app.catalog.loader import get_app
from app.catalog.registry_import import schema_problems
from app.services.connections.endpoint import config_headers
from tests.conftest import serving
from tests.doors import search
from tests.paths import TESTS
from tests.services.runtime.test_runtime_rest import board_api, connect

FIXTURES = TESTS / "fixtures" / "registry"
SCHEMA_URL = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture
def extra_dir(app, tmp_path, real_catalog_restored):
    """The operator's own definitions folder, configured for the test; the real catalog is restored after it."""
    directory = tmp_path / "extra"
    saved = app.config.get("CATALOG_EXTRA_DIR")
    app.config["CATALOG_EXTRA_DIR"] = str(directory)
    yield directory
    app.config["CATALOG_EXTRA_DIR"] = saved


def run_import(app, *args: str):
    return app.test_cli_runner().invoke(args=["catalog", "import", *args])


def write_document(tmp_path: Path, document: dict, name: str = "server.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


# --- the registry's schema and examples --------------------------------------------------------------------------


def test_the_registry_examples_against_the_registry_schema():
    for name in ("with-remote", "with-package", "minimal"):
        assert schema_problems(fixture(name)) == [], name
    assert schema_problems(fixture("missing-name")) == ["(document): 'name' is a required property"]
    assert schema_problems(fixture("bad-name-pattern")) == [
        "name: 'no-namespace-separator' does not match '^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$'"
    ]


def test_a_document_breaking_the_schema_is_refused_before_conversion(app, db, extra_dir):
    result = run_import(app, str(FIXTURES / "missing-name.json"))
    assert result.exit_code == 1
    assert result.stderr == (
        "the document does not match the server.json schema:\n"
        "(document): 'name' is a required property\n"
        "Nothing was imported.\n"
    )
    assert not extra_dir.exists()


# --- conversion --------------------------------------------------------------------------------------------------

REMOTE_WEATHER = {
    "schemaVersion": 1,
    "slug": "remote-weather",
    "name": "Remote Weather",
    "description": "Remote MCP server reachable over streamable HTTP.",
    "categories": ["imported"],
    "branding": {"logoUrl": "/static/img/apps/custom.svg"},
    "docsUrl": "https://modelcontextprotocol.io/examples",
    "methods": [
        {
            "key": "mcp-key",
            "label": "API key",
            "transport": "mcp_remote",
            "auth": "api_key",
            "grantKinds": ["organization", "user", "agent"],
            "defaults": {"serverUrl": "https://{host}/mcp"},
            "credentialFields": [
                {
                    "key": "authorization",
                    "label": "Authorization header",
                    "type": "password",
                    "required": True,
                    "secret": True,
                    "placeholder": "Authorization value",
                    "helpText": "Sent as the whole Authorization header value, scheme included (e.g. Bearer <token>).",
                }
            ],
            "tenantFields": [
                {
                    "key": "host",
                    "label": "API host",
                    "type": "text",
                    "required": True,
                    "secret": False,
                    "placeholder": "api.example.com",
                    "helpText": "Fills {host} in the server address https://{host}/mcp.",
                    "urlVariable": "host",
                    "defaultValue": "api.example.com",
                }
            ],
            "keyPlacement": {"location": "header", "name": "Authorization", "prefix": ""},
        }
    ],
}


def test_the_remote_example_becomes_a_definition_and_is_ingested(app, db, extra_dir, client, world):  # noqa: F811
    result = run_import(app, str(FIXTURES / "with-remote.json"))
    assert result.exit_code == 0, (result.output, result.exception)
    path = extra_dir / "remote-weather.json"
    lines = result.stdout.splitlines()
    assert lines[0] == f"Imported io.github.user/remote-weather as 'remote-weather' (API key): {path}"
    assert lines[1].startswith("Catalog ingested: 1 added, 0 updated, 0 removed, ")
    assert lines[2:] == ["  added: remote-weather"]
    assert path.read_text(encoding="utf-8") == json.dumps(REMOTE_WEATHER, indent=2, ensure_ascii=False) + "\n"

    app_definition = get_app("remote-weather")
    method = app_definition.methods[0]
    # The URL template stays the server address; its variable is a required tenant field that fills it.
    assert method.defaults.serverUrl == "https://{host}/mcp"
    assert [(f.key, f.urlVariable, f.required) for f in method.tenantFields] == [("host", "host", True)]
    assert [f.key for f in method.credentialFields] == [
        "authorization"
    ]  # the secret header is the credential
    found = search(client, world.token, "remote weather").json["results"]
    assert [(r["service"], r["state"]) for r in found[:1]] == [("remote-weather", "available")]

    again = run_import(app, str(FIXTURES / "with-remote.json"))
    assert again.exit_code == 1
    assert again.stderr == (
        "the catalog already has an app 'remote-weather'; choose another with --slug (or --force to replace that "
        "file)\nNothing was imported.\n"
    )
    assert run_import(app, str(FIXTURES / "with-remote.json"), "--force").exit_code == 0


def test_an_imported_app_connects_to_a_real_mcp_server(
    app, db, extra_dir, tmp_path, world, notes_server, monkeypatch
):  # noqa: F811
    """A server.json of ours for the notes peer: the URL template's variable becomes a field the member fills (the
    filled address goes through the outbound guard, so loopback is allow-listed here), the `Bearer {token}` header
    value gives the key placement's prefix, and the connection lists the peer's tools."""
    monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])
    parts = urlsplit(notes_server.url)
    document = {
        "$schema": SCHEMA_URL,
        "name": "io.github.example/notes",
        "title": "Team Notes",
        "description": "Notes served over streamable HTTP.",
        "version": "1.0.0",
        "remotes": [
            {
                "type": "streamable-http",
                "url": f"http://{{host}}{parts.path}",
                "variables": {"host": {"description": "Host and port of your notes server"}},
                "headers": [
                    {
                        "name": "Authorization",
                        "description": "Notes API key",
                        "value": "Bearer {token}",
                        "isSecret": True,
                        "isRequired": True,
                    }
                ],
            }
        ],
    }
    result = run_import(app, write_document(tmp_path, document), "--slug", "team-notes")
    assert result.exit_code == 0, (result.output, result.exception)
    method = get_app("team-notes").methods[0]
    assert method.keyPlacement.prefix == "Bearer "
    [host] = method.tenantFields
    assert host.urlVariable == "host" and host.required and host.defaultValue is None

    created = connect(
        app,
        world.owner,
        world.company,
        {
            "appSlug": "team-notes",
            "identity": "organization",
            "credentials": {"authorization": "notes-key-123"},
            "methodConfig": {"host": parts.netloc},
        },
    )
    assert created["tools"], created


def test_package_only_servers_are_refused_with_the_reason(app, db, extra_dir):
    result = run_import(app, str(FIXTURES / "with-package.json"))
    assert result.exit_code == 1
    assert result.stderr == (
        "io.github.user/local-weather is distributed only as packages (npm @modelcontextprotocol/server-weather "
        "(stdio)) and declares no remotes. Switchboard connects agents to remote MCP servers over HTTP and does not "
        "start local (stdio) processes: run the package behind an HTTP endpoint and add it as a Custom MCP server "
        "instead.\nNothing was imported.\n"
    )
    minimal = run_import(app, str(FIXTURES / "minimal.json"))
    assert minimal.stderr == (
        "io.github.user/weather declares no remotes: there is no server to connect to.\nNothing was imported.\n"
    )
    assert not extra_dir.exists()


def test_headers_map_to_credential_and_configuration_fields(app, db, extra_dir, tmp_path):
    document = {
        "$schema": SCHEMA_URL,
        "name": "com.example/crm",
        "description": "A CRM with a tenant header.",
        "version": "1.0.0",
        "remotes": [
            {
                "type": "streamable-http",
                "url": "https://crm.example.com/mcp",
                "headers": [
                    {"name": "X-API-Key", "description": "CRM API key", "isSecret": True, "isRequired": True},
                    {
                        "name": "X-Region",
                        "description": "Data region",
                        "choices": ["eu", "us"],
                        "default": "eu",
                    },
                ],
            }
        ],
    }
    result = run_import(app, write_document(tmp_path, document), "--slug", "acme-crm")
    assert result.exit_code == 0, result.output
    assert (
        "  note: the non-secret header X-Region is a configuration field; the gateway sends its value as that header"
        in result.stdout.splitlines()
    )
    method = get_app("acme-crm").methods[0]
    assert (method.keyPlacement.location, method.keyPlacement.name, method.keyPlacement.prefix) == (
        "header",
        "X-API-Key",
        "",
    )
    assert [(f.key, f.label, f.secret) for f in method.credentialFields] == [
        ("x_api_key", "CRM API key", True)
    ]
    region = method.tenantFields[0]
    assert (region.key, region.type, region.defaultValue, [o.value for o in region.options]) == (
        "x_region",
        "select",
        "eu",
        ["eu", "us"],
    )
    # The value the person picks is what the provider receives in that header (the credential stays apart).
    assert config_headers(method, {"x_region": "us"}) == {"X-Region": "us"}

    two_secrets = json.loads(json.dumps(document))
    two_secrets["remotes"][0]["headers"][1]["isSecret"] = True
    refused = run_import(app, write_document(tmp_path, two_secrets, "two.json"), "--slug", "two-keys")
    assert refused.stderr == (
        "the remote https://crm.example.com/mcp needs 2 secret headers (X-API-Key, X-Region); a Switchboard "
        "connection method carries one credential\nNothing was imported.\n"
    )


# --- fetching a URL ------------------------------------------------------------------------------------------------


@contextmanager
def serving_documents(documents: dict[str, bytes]):
    def wsgi(environ, start_response):
        body = documents.get(environ["PATH_INFO"])
        if body is None:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found"]
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]

    with serving(wsgi) as base_url:
        yield base_url


def test_a_url_is_fetched_through_the_outbound_guard(app, db, extra_dir, monkeypatch):
    body = (FIXTURES / "with-remote.json").read_bytes()
    with serving_documents({"/server.json": body}) as base_url:
        url = f"{base_url}/server.json"
        guarded = run_import(app, url)
        assert guarded.exit_code == 1
        assert guarded.stderr == (
            f"{url}: The host 127.0.0.1 resolves to a private or local address, which is not allowed.\n"
            "Nothing was imported.\n"
        )

        monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])
        missing = run_import(app, f"{base_url}/nothing.json")
        assert (
            missing.stderr
            == f"{base_url}/nothing.json: the server answered HTTP 404\nNothing was imported.\n"
        )
        fetched = run_import(app, url)
        assert fetched.exit_code == 0, fetched.output
    assert get_app("remote-weather") is not None


def test_url_variables_and_headers_cannot_smuggle_another_address_or_header(
    app, db, extra_dir, tmp_path, world, notes_server, monkeypatch
):  # noqa: F811
    """A variable fills one host or path segment only, and a configuration header never carries a line break."""
    monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])
    parts = urlsplit(notes_server.url)
    document = {
        "$schema": SCHEMA_URL,
        "name": "io.github.example/notes-team",
        "title": "Team Notes",
        "description": "Notes served over streamable HTTP.",
        "version": "1.0.0",
        "remotes": [
            {
                "type": "streamable-http",
                "url": f"http://{{host}}{parts.path}",
                "variables": {"host": {"description": "Host and port of your notes server"}},
                "headers": [
                    {
                        "name": "Authorization",
                        "value": "Bearer {token}",
                        "isSecret": True,
                        "isRequired": True,
                    },
                    {"name": "X-Team", "description": "Your team", "isRequired": True},
                ],
            }
        ],
    }
    assert run_import(app, write_document(tmp_path, document), "--slug", "team-notes").exit_code == 0
    method = get_app("team-notes").methods[0]
    assert [(f.key, f.header) for f in method.tenantFields] == [("host", None), ("x_team", "X-Team")]

    def attempt(config):
        body = {
            "appSlug": "team-notes",
            "identity": "organization",
            "credentials": {"authorization": "notes-key-123"},
            "methodConfig": config,
        }
        return board_api(
            app.test_client(),
            world.owner,
            "POST",
            f"/api/companies/{world.company.id}/tools/apps/connect",
            body,
        )

    for host in ("evil.example/x", "user@127.0.0.1", "127.0.0.1?q=1"):
        refused = attempt({"host": host, "x_team": "robots"})
        assert refused.status_code == 422, host
        assert "may hold letters, digits, dots, dashes and underscores" in refused.json["error"]
    injected = attempt({"host": parts.netloc, "x_team": "robots\r\nX-Admin: yes"})
    assert injected.status_code in (400, 422)
    fine = attempt({"host": parts.netloc, "x_team": "robots"})
    assert fine.status_code == 201 and fine.json["tools"], fine.json


# --- imported URLs are as untrusted as a member's ---------------------------------------------------------------


@contextmanager
def recording_peer():
    """A hostile 'provider' on loopback that records every request it gets (with its headers)."""
    seen: list[dict] = []

    def wsgi(environ, start_response):
        seen.append({k: v for k, v in environ.items() if k.startswith("HTTP_")})
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b"{}"]

    with serving(wsgi) as base_url:
        yield base_url, seen


def remote_document(url: str) -> dict:
    return {
        "$schema": SCHEMA_URL,
        "name": "io.github.hostile/inside",
        "title": "Inside",
        "description": "A server.json whose remote points inside the operator's network.",
        "version": "1.0.0",
        "remotes": [
            {
                "type": "streamable-http",
                "url": url,
                "headers": [{"name": "Authorization", "value": "Bearer {token}", "isSecret": True}],
            }
        ],
    }


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://127.0.0.2:8931/mcp", "127.0.0.2"),
        ("http://[::1]:8931/mcp", "::1"),
        ("http://localhost:8931/mcp", "localhost"),
        ("http://169.254.169.254/latest", "169.254.169.254"),
        ("http://[2002:7f00:1::]:8931/mcp", "2002:7f00:1::"),
        ("http://100.100.100.200/latest", "100.100.100.200"),
    ],
)
def test_an_internal_remote_is_refused_at_import(app, db, extra_dir, tmp_path, url, host):
    result = run_import(app, write_document(tmp_path, remote_document(url)))
    assert result.exit_code == 1
    assert result.stderr == (
        f"the remote {url} is not allowed: The host {host} resolves to a private or local address, which is not "
        "allowed. Only the operator's settings (SWITCHBOARD_PROVIDER_SERVER_URLS, "
        "SWITCHBOARD_OUTBOUND_ALLOWED_HOSTS) may point to internal addresses.\nNothing was imported.\n"
    )
    assert not extra_dir.exists()
    assert get_app("inside") is None


def test_a_definition_default_pointing_inside_is_guarded_at_every_use(
    app, db, extra_dir, world, notes_server, monkeypatch
):  # noqa: F811
    """A definition already in the catalog (an import from before the guard, or a hand-edited file) whose default
    names a loopback listener: connecting is refused and the listener never sees the member's credential. Only the
    operator's PROVIDER_SERVER_URLS (or allow-list) may point inside."""
    with recording_peer() as (base_url, seen):
        definition = json.loads(json.dumps(REMOTE_WEATHER))
        definition.update(slug="inside", name="Inside")
        [method] = definition["methods"]
        method["defaults"] = {"serverUrl": f"{base_url}/mcp"}
        del method["tenantFields"]
        extra_dir.mkdir(parents=True)
        (extra_dir / "inside.json").write_text(json.dumps(definition), encoding="utf-8")
        ingested = app.test_cli_runner().invoke(args=["catalog", "ingest"])
        assert ingested.exit_code == 0, ingested.output
        assert get_app("inside").methods[0].defaults.serverUrl == f"{base_url}/mcp"

        body = {
            "appSlug": "inside",
            "identity": "organization",
            "credentials": {"authorization": "Bearer member-secret-1"},
        }
        path = f"/api/companies/{world.company.id}/tools/apps/connect"
        refused = board_api(app.test_client(), world.owner, "POST", path, body)
        assert refused.status_code == 422, refused.json
        assert refused.json["error"] == (
            "The host 127.0.0.1 resolves to a private or local address, which is not allowed."
        )
        assert seen == []

        # The operator's setting may point inside: the same app at the notes peer connects.
        monkeypatch.setitem(app.config, "PROVIDER_SERVER_URLS", {"inside": notes_server.url})
        body["credentials"] = {"authorization": "Bearer notes-key-123"}
        fine = board_api(app.test_client(), world.owner, "POST", path, body)
        assert fine.status_code == 201 and fine.json["tools"], fine.json
        assert seen == []
