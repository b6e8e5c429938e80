"""`/api/openapi.json`: a valid OpenAPI 3.1 document that describes every JSON route with the models the routes use.

The operations come from the URL map and the `Doc` each view carries (`app/web/openapi/operations.py`): the drift
checks fail when a JSON route (under /api/, /runtime-tools/, /mcp/) is added without one, or a `Doc` names a method
its route does not serve.
"""

from __future__ import annotations

import inspect
import re

import jsonschema
import pytest
import schemathesis
from flask import Flask
from pydantic import BaseModel, ValidationError
from schemathesis.specs.openapi.definitions import OPENAPI_31

from app import register_blueprints
from app.web.api.validation import StrictBody
from app.web.openapi import document as openapi_document
from app.web.openapi import responses as openapi_responses
from app.web.openapi.schemas import RequestBodySchema, with_json_values

DOC_URL = "/api/openapi.json"
# The OAuth doors MCP clients use (issue 29): public (the client authenticates in the body, if at all), except the
# consent page, which is the signed-in person's; discovery, registration and consent never answer 401.
OAUTH_PUBLIC = {
    "/token",
    "/register",
    "/revoke",
    "/device_authorization",
    "/.well-known/oauth-authorization-server",
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp/gateway",
}
WITHOUT_401 = {
    DOC_URL,
    "/register",
    "/authorize",
    "/.well-known/oauth-authorization-server",
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp/gateway",
}


@pytest.fixture
def document(client):
    response = client.get(DOC_URL)
    assert response.status_code == 200
    return response.json


def _resolve(document: dict, schema: dict) -> dict:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    return document["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def _operations(document: dict):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


# --- validity ------------------------------------------------------------------------------------------------


def test_document_is_public_json(client):
    response = client.get(DOC_URL)
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.json["openapi"] == "3.1.0"


def test_document_validates_against_the_openapi_31_meta_schema(document):
    errors = sorted(
        jsonschema.Draft202012Validator(OPENAPI_31).iter_errors(document), key=lambda e: list(e.path)
    )
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])


def test_every_component_schema_is_valid_json_schema(document):
    for name, schema in document["components"]["schemas"].items():
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as err:  # pragma: no cover - the message is the point
            pytest.fail(f"{name}: {err.message}")


def test_schemathesis_loads_every_operation(document):
    schema = schemathesis.openapi.from_dict(document)
    loaded = []
    for result in schema.get_all_operations():
        operation = result.ok()  # raises on an operation schemathesis cannot use
        loaded.append((operation.method.lower(), operation.path))
    expected = sorted((method, path) for path, method, _op in _operations(document))
    assert sorted(loaded) == expected


def test_security_requirements_name_declared_schemes(document):
    declared = set(document["components"]["securitySchemes"])
    assert declared == {"apiKey", "session", "csrfToken", "runToken"}
    for path, method, operation in _operations(document):
        for requirement in operation["security"]:
            assert set(requirement) <= declared, (method, path)
        if path == DOC_URL or path in OAUTH_PUBLIC:
            assert operation["security"] == [], (method, path)
        elif path == "/authorize":
            assert operation["security"] == [{"session": []}], (method, path)
        elif path.startswith(("/runtime-tools/", "/mcp/")):
            assert operation["security"] == [{"runToken": []}], (method, path)
        else:
            expected_session = {"session": []} if method == "get" else {"session": [], "csrfToken": []}
            assert operation["security"] == [{"apiKey": []}, expected_session], (method, path)


def test_path_parameters_are_uuids(document):
    for path, method, operation in _operations(document):
        names = re.findall(r"{([^}]+)}", path)
        params = {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "path"}
        assert sorted(params) == sorted(names), (method, path)
        for param in params.values():
            assert param["required"] is True
            assert param["schema"] == {"type": "string", "format": "uuid"}


def test_every_operation_documents_its_errors(document):
    for path, method, operation in _operations(document):
        responses = operation["responses"]
        if path not in WITHOUT_401:
            assert "401" in responses, (method, path)
        for status, response in responses.items():
            if status.startswith("4") and status not in {"405"} and "content" in response:
                schema = response["content"]["application/json"]["schema"]
                variants = schema.get("anyOf", [schema])
                props = [_resolve(document, v).get("properties", {}) for v in variants]
                assert all("error" in p or "jsonrpc" in p for p in props), (method, path, status)


# --- completeness (drift) ------------------------------------------------------------------------------------


def test_every_json_route_is_documented(app):
    missing = openapi_document.undocumented_routes(app)
    assert not missing, (
        "JSON routes without a Doc (decorate each view, see app/web/openapi/operations.py): "
        + ", ".join(missing)
    )


def test_no_documented_operation_is_stale(app):
    stale = openapi_document.stale_operations(app)
    assert not stale, "Docs naming a method their route does not serve: " + ", ".join(stale)


def test_drift_check_notices_a_missing_entry(app):
    fewer = [op for op in openapi_document.documented_operations(app) if op.endpoint != "api.create_comment"]
    assert openapi_document.undocumented_routes(app, fewer) == [
        "POST /api/issues/{issue_id}/comments (api.create_comment)"
    ]


def test_served_document_is_the_built_one(app, document):
    built = openapi_document.build_document(app, server_url=app.config["PUBLIC_BASE_URL"].rstrip("/"))
    assert document == built
    assert set(document["paths"]) == {op.path for op in openapi_document.documented_operations(app)}


# --- the request models are the routes' own ----------------------------------------------------------------


def _route_operations():
    """The documented operations of the app's routes (a bare app: parametrizing needs them before any fixture)."""
    routes = Flask("routes")
    register_blueprints(routes)
    return openapi_document.documented_operations(routes)


def _operations_with_bodies():
    return [op for op in _route_operations() if op.body is not None]


def _route_validated_bodies():
    # MCP endpoints parse JSON-RPC by hand: their JsonRpcBody model documents the message shape only. OAuth's form
    # bodies are parsed by Authlib, which ignores unknown parameters as OAuth says (`test_form_bodies_are_oauths`).
    return [
        op
        for op in _operations_with_bodies()
        if op.body is not openapi_responses.JsonRpcBody and not op.doc.form
    ]


def test_form_bodies_are_oauths(document):
    """The form bodies are the OAuth endpoints' only, described by models in the OAuth door's own schemas, and say
    that unknown parameters are allowed (as strings)."""
    forms = [op for op in _operations_with_bodies() if op.doc.form]
    assert sorted(op.path for op in forms) == ["/device_authorization", "/revoke", "/token"]
    for op in forms:
        assert op.body.__module__ == "app.web.assistant_oauth.schemas", op.endpoint
        body = document["paths"][op.path][op.method]["requestBody"]
        assert list(body["content"]) == ["application/x-www-form-urlencoded"] and body["required"] is True


@pytest.mark.parametrize("op", _route_validated_bodies(), ids=lambda op: op.endpoint)
def test_request_body_is_the_model_the_route_validates_with(app, document, op):
    view = inspect.unwrap(app.view_functions[op.endpoint])  # under @login_required
    # The very class object the view module passes to parse_body, not a look-alike.
    assert any(value is op.body for value in view.__globals__.values()), (op.endpoint, op.body)

    body = document["paths"][op.path][op.method]["requestBody"]
    schema = _resolve(document, body["content"]["application/json"]["schema"])
    expected = with_json_values(
        op.body.model_json_schema(
            ref_template="#/components/schemas/{model}", schema_generator=RequestBodySchema
        )
    )
    expected.pop("$defs", None)
    assert schema == expected
    assert schema["additionalProperties"] is False  # unknown keys are refused, and the document says so
    assert body["required"] == bool(expected.get("required") or expected.get("minProperties"))


def _valid(document: dict, name: str, value) -> bool:
    schema = {**document["components"]["schemas"][name], "components": document["components"]}
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def _field_valid(document: dict, name: str, field: str, value) -> bool:
    schema = {
        **document["components"]["schemas"][name]["properties"][field],
        "components": document["components"],
    }
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def test_strict_bodies_keep_their_constraints(document):
    schemas = document["components"]["schemas"]
    assert schemas["ConnectBody"]["required"] == ["appSlug"]
    # Trimmed strings: the limits count the trimmed text, blanks around it are allowed.
    for text, valid in [("a" * 80, True), ("  " + "a" * 80 + "\n", True), ("a" * 81, False), (" ", False)]:
        assert _field_valid(document, "ConnectBody", "appSlug", text) is valid, text
    for text, valid in [("x", True), (" x\t", True), ("\u000b", False), ("", False), ("a" * 20001, False)]:
        assert _field_valid(document, "CommentBody", "body", text) is valid, text
    assert _field_valid(document, "CommentBody", "body", " " + "a" * 20000 + " ")
    for text, valid in [("", True), ("a" * 200, True), ("a" * 201, False), ("no\u0000nul", False)]:
        assert _field_valid(document, "SearchBody", "query", text) is valid, text
    assert schemas["RequestBody"]["required"] == ["service"]
    assert schemas["CompleteBody"]["properties"]["connectionId"]["format"] == "uuid"
    tool_policies = schemas["PatchBody"]["properties"]["toolPolicies"]
    assert tool_policies["type"] == "object" and "anyOf" not in tool_policies  # a map, never null
    assert tool_policies["additionalProperties"]["enum"] == ["allow", "ask_first", "block"]
    assert _valid(document, "PatchBody", {"toolPolicies": {"search": "allow"}})
    assert not _valid(document, "PatchBody", {"toolPolicies": {"se\u0000arch": "allow"}})  # keys too
    assert not _valid(document, "PatchBody", {})  # at least one field
    for name in ("ConnectBody", "FinishBody", "PatchBody", "CommentBody", "SearchBody", "RequestBody"):
        assert schemas[name]["additionalProperties"] is False, name


def test_a_phase_is_one_the_card_accepts(document):
    assert _valid(document, "PhaseBody", {"phase": "authorizing"})
    assert not _valid(document, "PhaseBody", {})
    assert not _valid(document, "PhaseBody", {"phase": "bogus"})
    operation = document["paths"]["/api/connection-intents/{interaction_id}/phase"]["post"]
    assert operation["requestBody"]["required"] is True


def test_a_free_form_value_is_any_json_without_unstorable_text(document):
    for value in [None, 1, 2.5, True, "text", [], {"a": [{"b": "c"}]}]:
        assert _valid(document, "JsonValue", value), value
    for value in ["a\u0000", ["\u0000"], {"k\u0000": 1}, {"a": {"b": ["\u0000"]}}]:
        assert not _valid(document, "JsonValue", value), value


def test_the_mcp_body_is_a_message_or_a_batch(document):
    def valid(body) -> bool:
        return _valid(document, "JsonRpcBody", body)

    assert valid({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert valid({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert valid({"jsonrpc": "2.0", "id": 7, "result": {}})  # the client's response: 202
    assert valid({"jsonrpc": "2.0"})  # no method and no id: 202
    assert valid([{"jsonrpc": "2.0", "id": 1, "method": "ping"}, 5])  # a batch: each entry answered
    for refused in [
        [],
        5,
        "ping",
        {"id": 1},
        {"id": 1, "method": 5},
        {"id": 1, "method": "ping", "params": []},
        {"id": 1, "method": "p\u0000ing"},
    ]:
        assert not valid(refused), refused
    for path in ("/mcp/runtime-tools", "/mcp/gateway"):
        operation = document["paths"][path]["post"]
        assert operation["requestBody"]["required"] is True
        ok = operation["responses"]["200"]["content"]["application/json"]["schema"]["anyOf"]
        assert {v["$ref"].rsplit("/", 1)[-1] for v in ok} == {"JsonRpcResponse", "JsonRpcBatchResponse"}
        assert "content" not in operation["responses"]["202"]


def test_refusals_say_their_headers(document):
    for path, method, operation in _operations(document):
        responses = operation["responses"]
        if path == DOC_URL:
            continue
        if path in OAUTH_PUBLIC or path == "/authorize":
            # Outside the guessing throttle; only registration is throttled (its own count), and says so.
            assert ("429" in responses) is (path == "/register"), (method, path)
            if "429" in responses:
                assert responses["429"]["headers"]["Retry-After"]["required"] is True, (method, path)
            continue
        assert responses["429"]["headers"]["Retry-After"]["required"] is True, (method, path)
        if "413" in responses:
            assert responses["413"]["headers"]["Connection"]["schema"] == {"const": "close"}, (method, path)
        challenge = responses["401"].get("headers", {}).get("WWW-Authenticate")
        assert (challenge is not None) is path.startswith(("/mcp/", "/runtime-tools/")), (method, path)
        if "405" in responses:
            assert responses["405"]["headers"]["Allow"]["schema"] == {"const": "POST"}


def test_route_bodies_subclass_strict_body():
    for op in _route_validated_bodies():
        assert issubclass(op.body, BaseModel)
        assert op.body.model_config.get("extra") == "forbid", op.endpoint
        if op.endpoint.startswith(("api.", "runtime.")):
            assert issubclass(op.body, StrictBody), op.endpoint


def test_validation_error_conforms_to_the_documented_shape(client, make, document):
    from tests.conftest import sign_in

    company = make.company()
    user = make.member(company, "owner")
    token = sign_in(client, user)
    response = client.post(
        f"/api/companies/{company.id}/tools/apps/connect",
        json={"appSlug": "honcho", "bogus": 1},
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 400
    schema = {
        **document["paths"]["/api/companies/{company_id}/tools/apps/connect"]["post"]["responses"]["400"][
            "content"
        ]["application/json"]["schema"],
        "components": document["components"],
    }
    jsonschema.validate(response.json, schema)
    assert response.json["details"][0]["loc"] == ["bogus"]


def test_an_integer_is_a_json_integer(document):
    """The document's `integer` allows `2.0` (the same JSON number as `2`), so the door takes it too; text, booleans
    and fractions stay refused."""
    from app.web.api.connection_models import TemplateRefBody

    assert _field_valid(document, "TemplateRefBody", "version", 2.0)
    assert TemplateRefBody.model_validate({"id": "memory", "version": 2.0}).version == 2
    for refused in ("2", True, 2.5, 0):
        assert not _field_valid(document, "TemplateRefBody", "version", refused), refused
        with pytest.raises(ValidationError):
            TemplateRefBody.model_validate({"id": "memory", "version": refused})
