"""The OpenAPI document: its operations derived from the Flask URL map and the `Doc` each view carries, built,
served, and checked against the URL map (the drift checks)."""

from __future__ import annotations

import re

from flask import Blueprint, Flask, jsonify
from flask.typing import ResponseReturnValue
from pydantic.json_schema import models_json_schema
from werkzeug.routing import Rule

from app.extensions import current_app_object
from app.web.openapi.operations import (
    ANY_REQUEST_ANSWERS,
    PUBLIC,
    SECURITY_SCHEMES,
    Answer,
    Operation,
    doc_of,
    documented,
)
from app.web.openapi.responses import OpenApiDocument
from app.web.openapi.schemas import JSON_VALUE, RequestBodySchema, json_value_schema, with_json_values

bp = Blueprint("openapi", __name__)

OPENAPI_VERSION = "3.1.0"
JSON_ROUTE_PREFIXES = ("/api/", "/runtime-tools/", "/mcp/")


# --- building the document -------------------------------------------------------------------------------------

_PATH_PARAM = re.compile(r"{([^}]+)}")


def flask_rule_to_path(rule: str) -> str:
    """`/api/issues/<issue_id>` (or `<uuid:issue_id>`) -> `/api/issues/{issue_id}`."""
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule)


def _served_methods(rule: Rule) -> list[str]:
    return sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})


def documented_operations(app: Flask | None = None) -> list[Operation]:
    """Every documented operation: one per route whose view carries a `Doc`, at its path, for the method the rule
    serves (or the one the `Doc` names; a `Doc` naming a method its rule does not serve is a stale operation)."""
    app = app or current_app_object()
    found: list[Operation] = []
    for rule in app.url_map.iter_rules():
        doc = doc_of(app.view_functions.get(rule.endpoint))
        if doc is None:
            continue
        methods = [doc.method.upper()] if doc.method else _served_methods(rule)
        path = flask_rule_to_path(rule.rule)
        found.extend(Operation(rule.endpoint, method.lower(), path, doc) for method in methods)
    return found


def _content(answer: Answer, refs: dict) -> dict | None:
    if not answer.models:
        return None
    schemas = [refs[(m, "serialization")] for m in answer.models]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    content: dict = {"application/json": {"schema": schema}}
    if answer.streams:
        content["text/event-stream"] = {
            "schema": {"type": "string", "description": "Progress events, then the answer"}
        }
    return content


def body_is_required(schema: dict) -> bool:
    """A door reads no body as `{}` (`parse_body`), or refuses it (the MCP doors): a body is required unless the
    schema is an object's that allows `{}`."""
    allows_empty = (
        schema.get("type") == "object" and not schema.get("required") and not schema.get("minProperties")
    )
    return not allows_empty


def _operation_object(op: Operation, refs: dict, schemas: dict) -> dict:
    names = _PATH_PARAM.findall(op.path)
    doc = op.doc
    result: dict = {
        "operationId": op.operation_id,
        "summary": doc.summary,
        "tags": [doc.tag],
        "security": list(doc.security),
        "responses": {},
    }
    if doc.description:
        result["description"] = doc.description
    if names:
        result["parameters"] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
            for name in names
        ]
    if op.body is not None:
        result["requestBody"] = {
            "required": body_is_required(schemas[op.body.__name__]),
            "content": {"application/x-www-form-urlencoded": {"schema": refs[(op.body, "validation")]}}
            if doc.form
            else {"application/json": {"schema": with_json_values(refs[(op.body, "validation")])}},
        }
    for status, answer in sorted(doc.responses.items()):
        response: dict = {"description": answer.description}
        if answer.headers:
            response["headers"] = answer.headers
        content = _content(answer, refs)
        if content is not None:
            response["content"] = content
        result["responses"][str(status)] = response
    return result


def build_document(
    app: Flask | None = None, operations: list[Operation] | None = None, server_url: str | None = None
) -> dict:
    """The OpenAPI 3.1 document for the given operations (all of them by default)."""
    operations = documented_operations(app) if operations is None else operations
    wanted: dict = {}
    for op in operations:
        if op.body is not None:
            wanted[(op.body, "validation")] = None
        for answer in op.doc.responses.values():
            for model in answer.models:
                wanted[(model, "serialization")] = None
    refs, top = models_json_schema(
        list(wanted), ref_template="#/components/schemas/{model}", schema_generator=RequestBodySchema
    )
    schemas = with_json_values(top.get("$defs", {}))
    if any(mode == "validation" for _model, mode in wanted):
        schemas[JSON_VALUE] = json_value_schema()
    paths: dict = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method] = _operation_object(op, refs, schemas)
    document: dict = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Switchboard",
            "version": "1",
            "description": (
                "Board API (session cookie + X-CSRFToken, or a bearer API key), runtime tools for agents (a bearer "
                'run token) and their MCP endpoints. Errors are `{"error": "..."}`; validation failures are 400 '
                '`{"error": "Validation error", "details": [...]}`; values that do not fit the state they are for '
                "(an app's method, a connection's tools, the company's agents) are 409 with the same details. A path "
                "no route serves under `/api/`, `/runtime-tools/`, `/mcp/` or `/.well-known/` answers a JSON 404 "
                '`{"error": "Not found"}`.'
            ),
        },
        "paths": paths,
        "components": {"schemas": dict(sorted(schemas.items())), "securitySchemes": SECURITY_SCHEMES},
    }
    if server_url:
        document["servers"] = [{"url": server_url}]
    return document


@bp.get("/api/openapi.json")
@documented(
    "This document",
    tag="meta",
    security=PUBLIC,
    responses={200: Answer("The OpenAPI 3.1 document", (OpenApiDocument,)), **ANY_REQUEST_ANSWERS},
)
def openapi_document() -> ResponseReturnValue:
    app = current_app_object()
    document = app.extensions.get("switchboard_openapi")
    if document is None:  # built once per app: the models and routes do not change while it runs
        server_url = str(app.config.get("PUBLIC_BASE_URL") or "").rstrip("/")
        document = app.extensions["switchboard_openapi"] = build_document(app, server_url=server_url)
    return jsonify(document)


def undocumented_routes(app: Flask, operations: list[Operation] | None = None) -> list[str]:
    """JSON routes in the URL map that the document does not describe (`METHOD path endpoint`)."""
    described = {(op.endpoint, op.method.upper(), op.path) for op in _given(app, operations)}
    missing = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith(JSON_ROUTE_PREFIXES):
            continue
        for method in _served_methods(rule):
            key = (rule.endpoint, method, flask_rule_to_path(rule.rule))
            if key not in described:
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
        for op in _given(app, operations)
        if (op.endpoint, op.method.upper(), op.path) not in served
    ]


def _given(app: Flask, given: list[Operation] | None) -> list[Operation]:
    return documented_operations(app) if given is None else given
