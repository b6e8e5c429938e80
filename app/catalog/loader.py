"""Load, validate and ingest app definitions; read the cached catalog at runtime.

The JSON files under `definitions/` (plus, when set, the operator's own folder `SWITCHBOARD_CATALOG_EXTRA_DIR`) are
the source of truth. `ingest_definitions` validates all of them and regenerates the `catalog_apps` table (the cached
catalog) from them, including each app's `agentInstructions` template, so edits and removals in a file are reflected
exactly, and records the files' fingerprint in `catalog_state` (see `app.catalog.sync` for the ingest at app start).
Nothing here contacts a network: remote MCP "instructions" prose is never read or adopted.

Runtime code reads only the cached catalog (`get_app`, `list_apps`), never the files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from flask import current_app, has_app_context
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from sqlalchemy import select

from app.catalog.schema import AppDefinition, DefinitionError, Method
from app.extensions import db
from app.models.base import utcnow
from app.models.connections import CUSTOM_APP_SLUG, CatalogApp, CatalogState
from app.models.installation import CatalogIngest

CATALOG_DIR = Path(__file__).resolve().parent
DEFINITIONS_DIR = CATALOG_DIR / "definitions"
EXTRA_DIR_ENV = "SWITCHBOARD_CATALOG_EXTRA_DIR"
# The code that turns files into cached rows: a change to it re-ingests at the next start like a changed file does.
_FINGERPRINTED_CODE = (CATALOG_DIR / "schema.py", CATALOG_DIR / "loader.py")

log = logging.getLogger(__name__)

# Parsed definitions of cached rows, keyed by (slug, content_hash): a changed row gets a new key.
_parsed_cache: dict[tuple[str, str], AppDefinition] = {}


class CatalogError(Exception):
    """One or more definition files are invalid; `messages` holds every problem as `file: path: message`."""

    def __init__(self, messages: list[str]):
        super().__init__("\n".join(messages))
        self.messages = messages


# --- validation -----------------------------------------------------------------------------------------------


def _format_path(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(file)"


def _message(error: ErrorDetails) -> tuple[tuple[str | int, ...], str]:
    """Turn one pydantic error into (path, plain message); cross-key rule failures carry their own sub-path."""
    loc = tuple(error["loc"])
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "value_error":
        cause = ctx.get("error")
        if isinstance(cause, DefinitionError):
            return loc + cause.path, cause.message
        return loc, str(cause) if cause is not None else error["msg"]
    if kind == "extra_forbidden":
        return loc, "unknown key"
    if kind == "missing":
        return loc, "required"
    if kind == "string_too_long":
        return loc, f"at most {ctx['max_length']} characters"
    if kind == "string_too_short":
        return loc, "must not be empty" if ctx.get(
            "min_length"
        ) == 1 else f"at least {ctx['min_length']} characters"
    if kind == "too_short":
        return loc, f"at least {ctx.get('min_length')} item(s) required"
    if kind == "string_pattern_mismatch":
        return loc, f"must match {ctx['pattern']}"
    if kind == "literal_error":
        return loc, f"must be one of {ctx['expected']}"
    return loc, error["msg"]


def validate_definition(data: Any, file_name: str) -> tuple[AppDefinition | None, list[str]]:
    """Validate one parsed JSON document; returns the definition or the list of `file: path: message` errors."""
    if not isinstance(data, dict):
        return None, [f"{file_name}: the file must contain a JSON object"]
    stem = Path(file_name).stem
    try:
        return AppDefinition.model_validate(data, context={"file_stem": stem}), []
    except ValidationError as exc:
        messages = []
        for error in exc.errors():
            loc, text = _message(error)
            messages.append(f"{file_name}: {_format_path(loc)}: {text}")
        return None, messages


def extra_definitions_dir() -> Path | None:
    """The operator's own definitions folder: app config `CATALOG_EXTRA_DIR`, else env SWITCHBOARD_CATALOG_EXTRA_DIR."""
    configured = current_app.config.get("CATALOG_EXTRA_DIR") if has_app_context() else None
    value = configured or os.environ.get(EXTRA_DIR_ENV) or ""
    return Path(value) if value.strip() else None


def definition_directories(
    directory: Path | str = DEFINITIONS_DIR, extra: Path | str | None = None
) -> list[Path]:
    """The folders one catalog is read from: `directory` (the shipped definitions by default), then the extra
    folder (`extra`, else the configured one) when there is one."""
    extra_dir = Path(extra) if extra is not None else extra_definitions_dir()
    directories = [Path(directory)]
    if extra_dir is not None and extra_dir.resolve() != Path(directory).resolve():
        directories.append(extra_dir)
    return directories


def _definition_paths(directories: Iterable[Path]) -> tuple[list[Path], list[str]]:
    paths: list[Path] = []
    errors: list[str] = []
    for directory in directories:
        if not directory.is_dir():
            errors.append(f"{directory}: not a directory")
            continue
        paths.extend(sorted(directory.glob("*.json")))
    return paths, errors


def definitions_fingerprint(directories: Iterable[Path | str]) -> str:
    """A digest of every definition file (folder order, name, bytes) and of the code that ingests them: equal digests
    mean an ingest would write the same catalog. Reading the files costs no query."""
    digest = hashlib.sha256()
    for code in _FINGERPRINTED_CODE:
        digest.update(code.read_bytes())
    for index, directory in enumerate(Path(d) for d in directories):
        paths = sorted(directory.glob("*.json")) if directory.is_dir() else []
        for path in paths:
            digest.update(f"\0{index}\0{path.name}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def load_definition_files(
    directory: Path | str = DEFINITIONS_DIR, *, extra: Path | str | None = None
) -> list[AppDefinition]:
    """Validate every `*.json` in `directory` and in the extra folder (see `definition_directories`), sorted by file
    name per folder; raise CatalogError listing every problem (a slug defined twice is one)."""
    directories = definition_directories(directory, extra)
    paths, errors = _definition_paths(directories)
    if not paths and not errors:
        # An empty directory would otherwise remove the whole cached catalog.
        raise CatalogError([f"{directories[0]}: no app definitions (*.json) found"])
    definitions: list[AppDefinition] = []
    seen: dict[str, Path] = {}
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            errors.append(f"{path.name}: invalid JSON: {exc}")
            continue
        definition, problems = validate_definition(data, path.name)
        errors.extend(problems)
        if definition is not None:
            if definition.slug in seen:
                errors.append(
                    f"{path}: slug {definition.slug!r} is already defined by {seen[definition.slug]}"
                )
                continue
            seen[definition.slug] = path
            definitions.append(definition)
    if errors:
        raise CatalogError(errors)
    return definitions


# --- ingestion ------------------------------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_hash(definition_json: dict) -> str:
    return hashlib.sha256(canonical_json(definition_json).encode("utf-8")).hexdigest()


def ingest_definitions(
    directory: Path | str = DEFINITIONS_DIR, *, extra: Path | str | None = None
) -> dict[str, list[str]]:
    """Regenerate the cached catalog from the definition files and record their fingerprint; the caller commits.

    Everything is validated before anything is written, so an invalid file leaves the table untouched. Returns
    `{"added", "updated", "removed", "unchanged"}`, each a sorted list of slugs.
    """
    directories = definition_directories(directory, extra)
    definitions = load_definition_files(directory, extra=extra)
    report: dict[str, list[str]] = {"added": [], "updated": [], "removed": [], "unchanged": []}
    existing = {row.slug: row for row in db.session.scalars(select(CatalogApp))}
    now = utcnow()
    for definition in definitions:
        payload = definition.model_dump(mode="json", exclude_none=False)
        instructions = payload["agentInstructions"]
        digest = content_hash(payload)
        row = existing.pop(definition.slug, None)
        if row is None:
            db.session.add(
                CatalogApp(
                    slug=definition.slug,
                    name=definition.name,
                    description=definition.description,
                    categories=list(definition.categories),
                    definition=payload,
                    agent_instructions=instructions,
                    content_hash=digest,
                    ingested_at=now,
                    **search_fields(payload),
                )
            )
            report["added"].append(definition.slug)
            continue
        if (
            row.content_hash == digest
            and row.definition == payload
            and row.agent_instructions == instructions
            and all(getattr(row, key) == value for key, value in search_fields(payload).items())
        ):
            report["unchanged"].append(definition.slug)
            continue
        row.name = definition.name
        row.description = definition.description
        row.categories = list(definition.categories)
        row.definition = payload
        row.agent_instructions = instructions
        row.content_hash = digest
        for key, value in search_fields(payload).items():
            setattr(row, key, value)
        row.ingested_at = now
        report["updated"].append(definition.slug)
    for slug, row in existing.items():
        db.session.delete(row)
        report["removed"].append(slug)
    _record_ingest(definitions_fingerprint(directories), now)
    db.session.flush()
    return {kind: sorted(slugs) for kind, slugs in report.items()}


def _record_ingest(fingerprint: str, now: datetime) -> None:
    if db.session.get(CatalogIngest, fingerprint) is None:
        db.session.add(CatalogIngest(definitions_hash=fingerprint, ingested_at=now))
    state = db.session.get(CatalogState, 1)
    if state is None:
        db.session.add(CatalogState(id=1, definitions_hash=fingerprint, ingest_count=1, ingested_at=now))
        return
    state.definitions_hash = fingerprint
    state.ingest_count = (state.ingest_count or 0) + 1
    state.ingested_at = now


def search_fields(payload: dict) -> dict:
    """The columns `connections_search` ranks a cached row on, from its definition payload (JSON form).

    Only apps an agent can request are searchable: the custom-server app is reached through its configured
    connections instead, and an app without methods cannot be connected.
    """
    methods = payload.get("methods") or []
    guidance = " ".join(method.get("whenToUse") or "" for method in methods)
    words = [payload["slug"], payload["name"], payload.get("description") or "", guidance]
    return {
        "searchable": bool(methods) and payload["slug"] != CUSTOM_APP_SLUG,
        "search_text": " ".join(words).lower(),
        "name_key": payload["name"].casefold(),
    }


# --- runtime readers (the cached catalog) ---------------------------------------------------------------------


def _parse_row(row: CatalogApp) -> AppDefinition | None:
    key = (row.slug, row.content_hash)
    cached = _parsed_cache.get(key)
    if cached is not None:
        return cached
    try:
        parsed = AppDefinition.model_validate(row.definition, context={"check_files": False})
    except ValidationError:
        # A row written by an older schema; re-run `switchboard catalog ingest`. Skip it rather than fail a page.
        log.exception("cached catalog row %r no longer validates", row.slug)
        return None
    _parsed_cache[key] = parsed
    return parsed


def _parsed(keys: Iterable[tuple[str, str]]) -> dict[str, AppDefinition]:
    """Parsed definitions for (slug, content_hash) keys: the cache answers known versions, and only rows whose
    version is new to this process are read in full (one query), so hot paths do not decode every definition."""
    keys = list(keys)
    missing = [slug for slug, digest in keys if (slug, digest) not in _parsed_cache]
    if missing:
        for row in db.session.scalars(select(CatalogApp).where(CatalogApp.slug.in_(missing))):
            _parse_row(row)
    result = {}
    for slug, digest in keys:
        parsed = _parsed_cache.get((slug, digest))
        if parsed is not None:
            result[slug] = parsed
    return result


def get_app_versions(versions: Iterable[tuple[str, str]]) -> dict[str, AppDefinition]:
    """Definitions for (slug, content_hash) pairs a caller already read with its own query (a version new to this
    process costs one query; known versions none)."""
    return _parsed(versions)


def get_app(slug: str) -> AppDefinition | None:
    """The cached definition of one app, or None when the catalog has no such slug."""
    return get_apps([slug]).get(slug)


def get_apps(slugs: Iterable[str]) -> dict[str, AppDefinition]:
    """Cached definitions of several apps, keyed by slug (unknown slugs are absent)."""
    wanted = set(slugs)
    if not wanted:
        return {}
    return _parsed(
        db.session.execute(
            select(CatalogApp.slug, CatalogApp.content_hash).where(CatalogApp.slug.in_(wanted))
        )
    )


def list_apps() -> list[AppDefinition]:
    """Every app in the cached catalog, sorted by name."""
    apps = _parsed(db.session.execute(select(CatalogApp.slug, CatalogApp.content_hash))).values()
    return sorted(apps, key=lambda app: (app.name.casefold(), app.slug))


def get_method(app: AppDefinition, method_key: str | None) -> Method:
    """The app's method with this key, else its first method (every app has at least one)."""
    return app.method(method_key)


def template_default(app: AppDefinition | None) -> dict | None:
    """The saved-setting default for a new connection: the app's template, enabled; None without a template."""
    template = app.agentInstructions if app is not None else None
    if template is None:
        return None
    return {
        "enabled": True,
        "text": template.text,
        "template": {"id": template.id, "version": template.version},
    }


def logo_url(app: AppDefinition, dark: bool = False) -> str:
    """The app's logo path (under /static/img/apps/); the dark variant when asked for and available."""
    if dark and app.branding.darkLogoUrl:
        return app.branding.darkLogoUrl
    return app.branding.logoUrl
