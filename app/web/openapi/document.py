"""Building the OpenAPI document from the registry, serving it, and the drift checks against `app.url_map`."""

from __future__ import annotations

import re

from flask import Blueprint, Flask, jsonify
from flask.typing import ResponseReturnValue
from pydantic.json_schema import models_json_schema

from app.extensions import current_app_object
from app.web.openapi.registry import SECURITY_SCHEMES, Answer, Operation, all_operations

bp = Blueprint("openapi", __name__)

OPENAPI_VERSION = "3.1.0"
JSON_ROUTE_PREFIXES = ("/api/", "/runtime-tools/", "/mcp/")


# --- building the document -------------------------------------------------------------------------------------

_PATH_PARAM = re.compile(r"{([^}]+)}")


def flask_rule_to_path(rule: str) -> str:
    """`/api/issues/<issue_id>` (or `<uuid:issue_id>`) -> `/api/issues/{issue_id}`."""
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule)


def _content(answer: Answer, refs: dict) -> dict | None:
    if not answer.models:
        return None
    schemas = [refs[(m, "serialization")] for m in answer.models]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    return {"application/json": {"schema": schema}}


def _operation_object(op: Operation, refs: dict) -> dict:
    names = _PATH_PARAM.findall(op.path)
    result: dict = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "tags": [op.tag],
        "security": list(op.security),
        "responses": {},
    }
    if op.description:
        result["description"] = op.description
    if names:
        result["parameters"] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
            for name in names
        ]
    if op.body is not None:
        required = any(f.is_required() for f in op.body.model_fields.values())
        result["requestBody"] = {
            "required": required,
            "content": {"application/json": {"schema": refs[(op.body, "validation")]}},
        }
    for status, answer in sorted(op.responses.items()):
        response: dict = {"description": answer.description}
        content = _content(answer, refs)
        if content is not None:
            response["content"] = content
        result["responses"][str(status)] = response
    return result


def build_document(
    app: Flask | None = None, operations: list[Operation] | None = None, server_url: str | None = None
) -> dict:
    """The OpenAPI 3.1 document for the given operations (all of them by default)."""
    operations = all_operations(app) if operations is None else operations
    wanted: dict = {}
    for op in operations:
        if op.body is not None:
            wanted[(op.body, "validation")] = None
        for answer in op.responses.values():
            for model in answer.models:
                wanted[(model, "serialization")] = None
    refs, top = models_json_schema(list(wanted), ref_template="#/components/schemas/{model}")
    paths: dict = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method] = _operation_object(op, refs)
    document: dict = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Switchboard",
            "version": "1",
            "description": (
                "Board API (session cookie + X-CSRFToken, or a bearer API key), runtime tools for agents (a bearer "
                'run token) and their MCP endpoints. Errors are `{"error": "..."}`; validation failures are 400 '
                '`{"error": "Validation error", "details": [...]}`.'
            ),
        },
        "paths": paths,
        "components": {"schemas": top.get("$defs", {}), "securitySchemes": SECURITY_SCHEMES},
    }
    if server_url:
        document["servers"] = [{"url": server_url}]
    return document


@bp.get("/api/openapi.json")
def openapi_document() -> ResponseReturnValue:
    app = current_app_object()
    document = app.extensions.get("switchboard_openapi")
    if document is None:  # built once per app: the models and routes do not change while it runs
        server_url = str(app.config.get("PUBLIC_BASE_URL") or "").rstrip("/")
        document = app.extensions["switchboard_openapi"] = build_document(app, server_url=server_url)
    return jsonify(document)


def undocumented_routes(app: Flask, operations: list[Operation] | None = None) -> list[str]:
    """JSON routes in the URL map that the document does not describe (`METHOD path endpoint`)."""
    documented = {(op.endpoint, op.method.upper(), op.path) for op in (operations or all_operations(app))}
    missing = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith(JSON_ROUTE_PREFIXES):
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            key = (rule.endpoint, method, flask_rule_to_path(rule.rule))
            if key not in documented:
                missing.append(f"{method} {key[2]} ({rule.endpoint})")
    return missing


def stale_operations(app: Flask, operations: list[Operation] | None = None) -> list[str]:
    """Documented operations that no route in the URL map serves."""
    served = {
        (rule.endpoint, method, flask_rule_to_path(rule.rule))
        for rule in app.url_map.iter_rules()
        for method in (rule.methods or set())
    }
    return [
        f"{op.method.upper()} {op.path} ({op.endpoint})"
        for op in (operations or all_operations(app))
        if (op.endpoint, op.method.upper(), op.path) not in served
    ]
