"""One owner for response shapes: the route list comes from the URL map and the `Doc` each view carries, and the
response models a view is documented with are the classes it serializes with.
"""

from __future__ import annotations

import inspect

import pytest
from flask import Blueprint, Flask, jsonify

from app import register_blueprints
from app.web.assistant_oauth import schemas as oauth_schemas
from app.web.openapi import document as openapi_document
from app.web.openapi import operations as openapi
from app.web.openapi.responses import JsonRpcBatchResponse, JsonRpcResponse, OpenApiDocument, respond

# The MCP doors answer JSON-RPC built by the SDK's own types (`app.core.mcp_messages`), and the document view sends
# the document: their documented models describe those, they do not build them.
# Answers built by Authlib or `jsonify` in OAuth's own shapes (issue 29): their models describe them only.
DESCRIBED_ONLY = {JsonRpcResponse, JsonRpcBatchResponse, OpenApiDocument, *oauth_schemas.DESCRIBED_ONLY}


def _route_operations():
    routes = Flask("routes")
    register_blueprints(routes)
    return openapi_document.documented_operations(routes)


def _toy_app() -> Flask:
    """Two JSON routes: one documented, one whose Doc names a method its route does not serve; one undocumented."""
    bp = Blueprint("toy", __name__)

    @bp.get("/api/toys/<toy_id>")
    @openapi.board_read("Read a toy", "toys", OpenApiDocument)
    def read_toy(toy_id):
        return jsonify({})

    @bp.post("/api/toys")
    @openapi.documented("Make a toy", tag="toys", security=openapi.BOARD_WRITE, responses={}, method="put")
    def make_toy():
        return jsonify({})

    @bp.delete("/api/toys/<toy_id>")
    def delete_toy(toy_id):
        return "", 204

    app = Flask("toy")
    app.register_blueprint(bp)
    return app


def test_operations_are_the_url_maps_documented_routes():
    app = _toy_app()
    found = {(op.endpoint, op.method, op.path) for op in openapi_document.documented_operations(app)}
    assert found == {
        ("toy.read_toy", "get", "/api/toys/{toy_id}"),
        ("toy.make_toy", "put", "/api/toys"),
    }


def test_drift_checks_name_an_undocumented_route_and_a_doc_for_a_method_not_served():
    app = _toy_app()
    assert openapi_document.undocumented_routes(app) == [
        "POST /api/toys (toy.make_toy)",
        "DELETE /api/toys/{toy_id} (toy.delete_toy)",
    ]
    assert openapi_document.stale_operations(app) == ["PUT /api/toys (toy.make_toy)"]


def test_a_doc_survives_the_login_wrapper():
    from app.web.oauth import start_json

    assert inspect.unwrap(start_json) is not start_json  # under @login_required
    assert openapi.doc_of(start_json) is openapi.doc_of(inspect.unwrap(start_json))
    assert openapi.doc_of(start_json).body.__name__ == "StartBody"


def _success_models():
    for op in _route_operations():
        for status, answer in op.doc.responses.items():
            for model in answer.models:
                if 200 <= status < 300 and model not in DESCRIBED_ONLY:
                    yield pytest.param(op, model, id=f"{op.endpoint} {status} {model.__name__}")


@pytest.mark.parametrize(("op", "model"), list(_success_models()))
def test_documented_success_model_is_the_one_the_view_serializes_with(app, op, model):
    view = inspect.unwrap(app.view_functions[op.endpoint])
    # The very class the view module builds its answer with (and hands to `respond`), not a look-alike.
    assert any(value is model for value in view.__globals__.values()), (op.endpoint, model)
    assert "respond" in view.__code__.co_names, op.endpoint


def test_respond_leaves_unset_optional_fields_out(app):
    from app.web.notifications.schemas import InboxItem

    item = InboxItem.model_validate(
        {
            "id": "00000000-0000-4000-8000-000000000001",
            "kind": "tool_approval",
            "status": "pending",
            "issueId": "00000000-0000-4000-8000-000000000002",
            "issueIdentifier": "ACME-1",
            "agentId": None,
            "tool": "github__search",
            "createdAt": "2026-01-02T03:04:05",
        }
    )
    with app.test_request_context():
        response, status = respond(item, 201)
    assert status == 201
    assert response.get_data() == (
        b'{"agentId":null,"createdAt":"2026-01-02T03:04:05+00:00","id":"00000000-0000-4000-8000-000000000001",'
        b'"issueId":"00000000-0000-4000-8000-000000000002","issueIdentifier":"ACME-1","kind":"tool_approval",'
        b'"status":"pending","tool":"github__search"}\n'
    )
