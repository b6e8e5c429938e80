"""The answers fuzzing does not reach conform to the document too: a throttled address (429), an oversized body (413),
a foreign `Origin` (403), a bad token (401), an SSE probe (405), a query with NUL (400), batches (200 arrays, 202).
Each is a real request to the app served on loopback; its status must be documented for the operation, its body
valid against the documented schema, and every header the document calls required present with a valid value.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import jsonschema
import pytest
import requests

from app.services import login_throttle
from app.services.accounts import create_api_key
from app.services.runs.tokens import mint_run_token, open_run
from tests.conftest import serving

EVIL = {"Origin": "http://evil.example"}


@pytest.fixture
def live(app, db, make):
    company = make.company("Answers Co")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Answerer")
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    _key, api_key = create_api_key(owner, "answers")
    run = open_run(agent, issue)
    db.session.commit()
    token = mint_run_token(run).token
    with serving(app) as base:
        document = requests.get(f"{base}/api/openapi.json", timeout=10).json()
        yield SimpleNamespace(
            base=base, document=document, company=company, issue=issue, key=api_key, token=token
        )


def _template_of(document: dict, path: str) -> str:
    for template in document["paths"]:
        if re.fullmatch(re.sub(r"{[^}]+}", "[^/]+", template), path):
            return template
    raise AssertionError(f"{path} is not documented")


def conforms(live, response: requests.Response, status: int) -> None:
    """The response has `status`, which the document names for its operation, with the documented body and
    headers."""
    assert response.status_code == status, response.text[:300]
    request = response.request
    path = request.path_url.split("?", 1)[0]
    operation = live.document["paths"][_template_of(live.document, path)][request.method.lower()]
    documented = operation["responses"].get(str(status))
    assert documented is not None, (request.method, path, status)
    for name, header in documented.get("headers", {}).items():
        value = response.headers.get(name)
        assert value is not None or not header["required"], (name, path, status)
        if value is not None:
            typed = int(value) if header["schema"].get("type") == "integer" else value
            jsonschema.validate(typed, header["schema"])
    content = documented.get("content")
    if content is None:
        assert response.content == b"", response.content[:200]
        return
    media = response.headers["Content-Type"].split(";")[0]
    assert media in content, (media, path, status)
    schema = {**content[media]["schema"], "components": live.document["components"]}
    jsonschema.validate(response.json(), schema)


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_a_throttled_address_is_told_when_to_come_back(app, live):
    login_throttle.reset()
    saved = app.config["AUTH_ADDRESS_MAX_FAILURES"]
    app.config["AUTH_ADDRESS_MAX_FAILURES"] = 1
    try:
        with app.app_context():
            login_throttle.record_address_failure("127.0.0.1")
        base = live.base
        answers = [
            requests.get(
                f"{base}/api/companies/{live.company.id}/issues", headers=bearer(live.key), timeout=10
            ),
            requests.post(
                f"{base}/runtime-tools/connections/search", json={}, headers=bearer(live.token), timeout=10
            ),
            requests.post(
                f"{base}/mcp/runtime-tools", json={"id": 1}, headers=bearer(live.token), timeout=10
            ),
            requests.post(f"{base}/mcp/gateway", json={"id": 1}, headers=bearer(live.token), timeout=10),
            requests.get(f"{base}/mcp/gateway", headers=bearer(live.token), timeout=10),
        ]
    finally:
        app.config["AUTH_ADDRESS_MAX_FAILURES"] = saved
        login_throttle.reset()
    for answer in answers:
        conforms(live, answer, 429)
        assert int(answer.headers["Retry-After"]) >= 1


def test_an_oversized_body_is_refused_and_the_connection_closed(app, live):
    saved = app.config["MAX_CONTENT_LENGTH"]
    app.config["MAX_CONTENT_LENGTH"] = 1024
    big = {"body": "x" * 2048}
    try:
        answers = [
            requests.post(
                f"{live.base}/api/issues/{live.issue.id}/comments", json=big, headers=bearer(live.key)
            ),
            requests.post(f"{live.base}/mcp/gateway", json=big, headers=bearer(live.token), timeout=10),
            requests.post(f"{live.base}/mcp/runtime-tools", json=big, headers=bearer(live.token), timeout=10),
            requests.post(
                f"{live.base}/runtime-tools/connections/request", json=big, headers=bearer(live.token)
            ),
        ]
    finally:
        app.config["MAX_CONTENT_LENGTH"] = saved
    for answer in answers:
        conforms(live, answer, 413)
        assert answer.headers["Connection"] == "close"


def test_a_foreign_origin_is_refused_in_each_doors_shape(live):
    base = live.base
    search = requests.post(
        f"{base}/runtime-tools/connections/search",
        json={},
        headers={**bearer(live.token), **EVIL},
        timeout=10,
    )
    conforms(live, search, 403)
    assert set(search.json()) == {"error"}  # the REST door's own shape
    for answer in [
        requests.post(f"{base}/mcp/runtime-tools", json={"id": 1}, headers={**bearer(live.token), **EVIL}),
        requests.post(
            f"{base}/mcp/gateway", json={"id": 1}, headers={**bearer(live.token), **EVIL}, timeout=10
        ),
        requests.get(f"{base}/mcp/gateway", headers={**bearer(live.token), **EVIL}, timeout=10),
    ]:
        conforms(live, answer, 403)
        assert answer.json()["error"]["code"] == -32600


def test_a_bad_token_is_challenged(live):
    base = live.base
    gateway = requests.post(f"{base}/mcp/gateway", json={"id": 1}, headers=bearer("nope"), timeout=10)
    conforms(live, gateway, 401)
    assert gateway.json()["error"]["code"] == -32001
    for answer in [
        requests.post(f"{base}/mcp/runtime-tools", json={"id": 1}, headers=bearer("nope"), timeout=10),
        requests.get(f"{base}/mcp/runtime-tools", headers=bearer("nope"), timeout=10),
        requests.post(
            f"{base}/runtime-tools/connections/request", json={"service": "x"}, headers=bearer("nope")
        ),
    ]:
        conforms(live, answer, 401)
        assert answer.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
    gateway_challenge = gateway.headers["WWW-Authenticate"]
    assert gateway_challenge.startswith('Bearer error="invalid_token", resource_metadata="'), (
        gateway_challenge
    )
    unsent = requests.get(f"{base}/mcp/gateway", timeout=10)
    conforms(live, unsent, 401)
    assert unsent.headers["WWW-Authenticate"].startswith('Bearer resource_metadata="')


def test_an_sse_probe_is_sent_to_post(live):
    for door in ("/mcp/gateway", "/mcp/runtime-tools"):
        answer = requests.get(
            f"{live.base}{door}", headers={**bearer(live.token), "Accept": "text/event-stream"}, timeout=10
        )
        conforms(live, answer, 405)


def test_a_query_with_nul_is_refused(live):
    answer = requests.get(
        f"{live.base}/api/companies/{live.company.id}/issues?q=%00", headers=bearer(live.key), timeout=10
    )
    conforms(live, answer, 400)
    assert answer.json()["details"][0]["type"] == "string_nul"


def test_batches_are_answered_with_arrays_and_notifications_with_202(live):
    for door in ("/mcp/runtime-tools", "/mcp/gateway"):
        url = f"{live.base}{door}"
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            7,
        ]
        answered = requests.post(url, json=batch, headers=bearer(live.token), timeout=10)
        conforms(live, answered, 200)
        assert [entry.get("id") for entry in answered.json()] == [1, 2, None]
        quiet = [{"jsonrpc": "2.0", "method": "notifications/initialized"}]
        conforms(live, requests.post(url, json=quiet, headers=bearer(live.token), timeout=10), 202)
        reply = {"jsonrpc": "2.0", "id": 9, "result": {}}  # the client's response: no method
        conforms(live, requests.post(url, json=reply, headers=bearer(live.token), timeout=10), 202)
        conforms(live, requests.post(url, json=[], headers=bearer(live.token), timeout=10), 400)


def test_paths_no_route_serves_answer_the_json_404_the_document_describes(live):
    description = live.document["info"]["description"]
    assert "`/api/`, `/runtime-tools/`, `/mcp/` or `/.well-known/` answers a JSON 404" in description
    for path in ("/api/nothing", "/runtime-tools/nothing", "/mcp/nothing", "/.well-known/x"):
        answer = requests.post(f"{live.base}{path}", json={}, timeout=10)
        assert answer.status_code == 404, path
        assert answer.json() == {"error": "Not found"}, path
