"""Turn an MCP Registry `server.json` into a validated app definition (`switchboard catalog import`).

The document is read from a file or fetched from a URL (through the outbound guard, with the outbound timeout and a
size limit), validated against the registry's JSON Schema (`registry/server.schema.json`, a copy of
`docs/reference/server-json/` in modelcontextprotocol/registry), then converted:

- each remote becomes a connection method: a `streamable-http` remote a `transport: mcp_remote` method, an `sse`
  remote (the older HTTP+SSE transport) a `transport: sse` method; streamable HTTP methods come first, so the
  default method is the current transport where the server offers both;
- a secret header becomes the method's credential field, placed in that header (a `value` like `Bearer {token}` gives
  the prefix); a method carries one credential, so a remote with several secret headers is refused;
- non-secret headers become tenant (configuration) fields sent in those headers;
- a `url` with `{variables}` stays the method's server URL template; each variable becomes a required tenant field
  (`urlVariable`) whose value fills it at connect time (one label or path segment), through the outbound guard;
- a remote without a secret header signs in with OAuth (discovery and dynamic registration, as the MCP
  authorization spec has remote servers do), or needs no sign-in with `auth="none"`.

Package-only (stdio) servers are refused: Switchboard connects to remote servers and runs no local processes.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from flask import current_app
from jsonschema.validators import validator_for

from app.catalog.loader import CATALOG_DIR, validate_definition
from app.core.errors import ProviderRefused
from app.core.net_guard import UnresolvedHost, UnsafeUrl, check_outbound_url, guarded_transport

SCHEMA_PATH = CATALOG_DIR / "registry" / "server.schema.json"
MAX_DOCUMENT_BYTES = 1024 * 1024
IMPORTED_LOGO = "/static/img/apps/custom.svg"
IMPORTED_CATEGORY = "imported"
_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

AuthWithoutKey = Literal["oauth", "none"]


class ImportRefused(Exception):
    """The document cannot become an app definition; `messages` say why (one line each)."""

    def __init__(self, messages: list[str] | str):
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        super().__init__("\n".join(self.messages))


# --- reading --------------------------------------------------------------------------------------------------


def read_server_json(source: str) -> dict:
    """The parsed document at `source`: an http(s) URL (fetched through the outbound guard) or a file path."""
    if source.startswith(("http://", "https://")):
        raw = _fetch(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise ImportRefused(f"{source}: no such file")
        if path.stat().st_size > MAX_DOCUMENT_BYTES:
            raise ImportRefused(f"{source}: larger than {MAX_DOCUMENT_BYTES} bytes")
        raw = path.read_bytes()
    try:
        document = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ImportRefused(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ImportRefused(f"{source}: a server.json document is a JSON object")
    return document


def _fetch(url: str) -> bytes:
    try:
        check_outbound_url(url)
    except ProviderRefused as refused:
        raise ImportRefused(f"{url}: {refused}") from None
    timeout = float(current_app.config.get("OUTBOUND_TIMEOUT_SECONDS", 10))
    try:
        with (
            httpx.Client(
                transport=guarded_transport(), timeout=timeout, follow_redirects=False, trust_env=False
            ) as client,
            client.stream("GET", url, headers={"Accept": "application/json"}) as response,
        ):
            if response.status_code != 200:
                raise ImportRefused(f"{url}: the server answered HTTP {response.status_code}")
            body = bytearray()
            for chunk in response.iter_bytes():
                body.extend(chunk)
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise ImportRefused(f"{url}: larger than {MAX_DOCUMENT_BYTES} bytes")
            return bytes(body)
    except httpx.TimeoutException:
        raise ImportRefused(f"{url}: no answer within {timeout:g} seconds") from None
    except httpx.HTTPError as exc:
        raise ImportRefused(f"{url}: could not be fetched ({exc})") from None


# --- validation -----------------------------------------------------------------------------------------------


@cache
def _validator() -> Any:  # a jsonschema validator (jsonschema ships no type information)
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_problems(document: Any) -> list[str]:
    """Where `document` breaks the registry's server.json schema, one `path: message` line per problem."""
    problems = []
    for error in sorted(_validator().iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path]):
        path = "".join(
            f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p))
            for i, p in enumerate(error.absolute_path)
        )
        problems.append(f"{path or '(document)'}: {error.message}")
    return problems


# --- conversion -----------------------------------------------------------------------------------------------


def slug_for(document: dict) -> str:
    """`io.github.user/remote-weather` -> `remote-weather`."""
    local = document["name"].split("/", 1)[-1].lower()
    slug = re.sub(r"[^a-z0-9]+", "-", local).strip("-")
    return slug[:80].rstrip("-") or "imported"


def _field_key(header: str) -> str:
    key = re.sub(r"[^A-Za-z0-9]+", "_", header).strip("_").lower()
    return key if key and key[0].isalpha() else f"h_{key}"


def _https(value: Any) -> str | None:
    return value if isinstance(value, str) and value.startswith("https://") else None


def _url_variable_fields(remote: dict, names: list[str]) -> list[dict]:
    """One required tenant field per `{variable}` of the remote's URL template; the server URL stays the template
    (filled at connect time, through the outbound guard)."""
    variables = remote.get("variables") or {}
    fields = []
    for name in names:
        spec = variables.get(name) or {}
        description = (spec.get("description") or "").strip()
        field: dict[str, Any] = {
            "key": _field_key(name),
            "label": (description or name)[:500],
            "type": "select" if spec.get("choices") else "text",
            "required": True,
            "secret": False,
            "placeholder": str(spec.get("default") or name)[:500],
            "helpText": f"Fills {{{name}}} in the server address {remote['url']}."[:2000],
            "urlVariable": name,
        }
        if spec.get("choices"):
            field["options"] = [{"value": c, "label": c} for c in spec["choices"]]
        if spec.get("default") is not None:
            field["defaultValue"] = str(spec["default"])
        fields.append(field)
    return fields


def _header_field(header: dict, *, secret: bool) -> dict:
    name = header["name"]
    description = (header.get("description") or "").strip()
    field: dict[str, Any] = {
        "key": _field_key(name),
        "label": (description or name)[:500] if not secret else (description or f"{name} header")[:500],
        "type": "password" if secret else ("select" if header.get("choices") else "text"),
        "required": True if secret else bool(header.get("isRequired")),
        "secret": secret,
    }
    placeholder = header.get("placeholder") or (None if secret else header.get("default"))
    field["placeholder"] = (placeholder or f"{name} value")[:500]
    if secret:
        whole = name.lower() == "authorization" and not _prefix(header)
        field["helpText"] = (
            "Sent as the whole Authorization header value, scheme included (e.g. Bearer <token>)."
            if whole
            else f"Sent in the {name} header."
        )
    else:
        field["helpText"] = f"Sent to the server in the {name} header."
        field["header"] = name
    if not secret:
        if header.get("choices"):
            field["options"] = [{"value": c, "label": c} for c in header["choices"]]
        if header.get("default") is not None:
            field["defaultValue"] = header["default"]
    return field


def _prefix(header: dict) -> str:
    """`Bearer {token}` -> `Bearer ` (what comes before the one variable the member's secret fills)."""
    value = header.get("value") or ""
    match = _VARIABLE.search(value)
    return value[: match.start()] if match and value.endswith(match.group(0)) else ""


def _transport(remote: dict) -> str:
    return "sse" if remote.get("type") == "sse" else "mcp_remote"


def _method(remote: dict, key: str, label_suffix: str, auth_without_key: AuthWithoutKey) -> dict:
    headers = remote.get("headers") or []
    secrets = [h for h in headers if h.get("isSecret")]
    if len(secrets) > 1:
        secret_names = ", ".join(h["name"] for h in secrets)
        raise ImportRefused(
            f"the remote {remote['url']} needs {len(secrets)} secret headers ({secret_names}); "
            "a Switchboard connection method carries one credential"
        )
    method: dict[str, Any] = {"key": key, "transport": _transport(remote)}
    if secrets:
        secret = secrets[0]
        method.update(
            label=f"API key{label_suffix}",
            auth="api_key",
            grantKinds=["organization", "user", "agent"],
            credentialFields=[_header_field(secret, secret=True)],
            keyPlacement={"location": "header", "name": secret["name"], "prefix": _prefix(secret)},
        )
    elif auth_without_key == "oauth":
        method.update(label=f"Sign in{label_suffix}", auth="oauth", grantKinds=["user", "organization"])
    else:
        method.update(label=f"No sign-in{label_suffix}", auth="none", grantKinds=["organization"])
    names = list(dict.fromkeys(_VARIABLE.findall(remote["url"])))
    tenant = _url_variable_fields(remote, names)
    tenant.extend(_header_field(h, secret=False) for h in headers if not h.get("isSecret"))
    defaults: dict[str, Any] = {"serverUrl": remote["url"]}
    if method["auth"] == "oauth":
        defaults["dynamicClientRegistration"] = True
    if defaults:
        method["defaults"] = defaults
    if tenant:
        method["tenantFields"] = tenant
    # Keys in the order the definition files use.
    order = [
        "key",
        "label",
        "transport",
        "auth",
        "grantKinds",
        "defaults",
        "credentialFields",
        "tenantFields",
    ]
    return {k: method[k] for k in [*order, "keyPlacement"] if k in method}


def _internal_remote(url: str) -> str | None:
    """Why a remote's URL may not become a default, if it may not: it must pass the outbound guard like a URL a
    member types (a host that does not resolve now is checked again at connect time; a `{variable}` in the host is
    filled and checked at connect time). Only the operator's settings may point inside."""
    if "{" in urlsplit(url).netloc:
        return None
    try:
        check_outbound_url(url)
    except UnresolvedHost:
        return None
    except (UnsafeUrl, ValueError) as refused:
        return (
            f"the remote {url} is not allowed: {refused} Only the operator's settings "
            "(SWITCHBOARD_PROVIDER_SERVER_URLS, SWITCHBOARD_OUTBOUND_ALLOWED_HOSTS) may point to internal addresses."
        )
    return None


def convert(
    document: dict, *, slug: str | None = None, auth_without_key: AuthWithoutKey = "oauth"
) -> tuple[dict, list[str]]:
    """The app definition for a schema-valid server.json, and notes on what was left out. Raises ImportRefused."""
    remotes = document.get("remotes") or []
    if not remotes:
        packages = document.get("packages") or []
        if packages:
            kinds = ", ".join(
                f"{p.get('registryType')} {p.get('identifier')} ({(p.get('transport') or {}).get('type')})"
                for p in packages
            )
            raise ImportRefused(
                f"{document['name']} is distributed only as packages ({kinds}) and declares no remotes. "
                "Switchboard connects agents to remote MCP servers over HTTP and does not start local (stdio) "
                "processes: run the package behind an HTTP endpoint and add it as a Custom MCP server instead."
            )
        raise ImportRefused(f"{document['name']} declares no remotes: there is no server to connect to.")
    # Streamable HTTP first (a stable sort): a definition's first method is its default.
    remotes = sorted(remotes, key=lambda r: _transport(r) == "sse")
    notes: list[str] = []
    slug = slug or slug_for(document)
    methods = []
    used: set[str] = set()
    refused = [problem for remote in remotes if (problem := _internal_remote(remote["url"]))]
    if refused:
        raise ImportRefused(refused)
    for remote in remotes:
        sse = _transport(remote) == "sse"
        method = _method(remote, "pending", "", auth_without_key)
        base = {"api_key": "mcp-key", "oauth": "mcp-oauth", "none": "mcp"}[method["auth"]]
        base = base.replace("mcp", "sse", 1) if sse else base
        key, n = base, 1
        while key in used:
            n += 1
            key = f"{base}-{n}"
        used.add(key)
        where = [urlsplit(remote["url"]).netloc or remote["url"]] if len(remotes) > 1 else []
        details = [*where, "SSE"] if sse else where
        suffix = f" ({', '.join(details)})" if details else ""
        methods.append(_method(remote, key, suffix, auth_without_key))
        plain = [h["name"] for h in remote.get("headers") or [] if not h.get("isSecret")]
        notes.extend(
            f"the non-secret header {name} is a configuration field; the gateway sends its value as that header"
            for name in plain
        )
    definition: dict[str, Any] = {
        "schemaVersion": 1,
        "slug": slug,
        "name": (document.get("title") or document["name"].split("/", 1)[-1])[:500],
        "description": document["description"],
        "categories": [IMPORTED_CATEGORY],
        "branding": {"logoUrl": IMPORTED_LOGO},
    }
    docs = _https(document.get("websiteUrl")) or _https((document.get("repository") or {}).get("url"))
    if docs:
        definition["docsUrl"] = docs
    definition["methods"] = methods
    _definition, problems = validate_definition(definition, f"{slug}.json")
    if problems:
        raise ImportRefused(problems)
    return definition, notes


def import_document(
    document: dict, *, slug: str | None = None, auth_without_key: AuthWithoutKey = "oauth"
) -> tuple[dict, list[str]]:
    """Validate against the registry schema, then convert (see `convert`)."""
    problems = schema_problems(document)
    if problems:
        raise ImportRefused(["the document does not match the server.json schema:", *problems])
    return convert(document, slug=slug, auth_without_key=auth_without_key)


def write_definition(definition: dict, directory: Path, existing_slugs: set[str], *, force: bool) -> Path:
    """Write `<slug>.json` into `directory`; refuse a slug the catalog already has (unless replacing it with --force
    in the same folder)."""
    path = directory / f"{definition['slug']}.json"
    if definition["slug"] in existing_slugs and not (force and path.is_file()):
        raise ImportRefused(
            f"the catalog already has an app {definition['slug']!r}; choose another with --slug"
            + (" (or --force to replace that file)" if path.is_file() else "")
        )
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(definition, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
