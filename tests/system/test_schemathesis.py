"""Schemathesis against a live server: every documented operation, positive inputs generated from the document.

The server is a real werkzeug server on loopback with a seeded company: an owner with a board API key, an agent
running (a live, task-bound heartbeat run with a runtime-tools token) on an in-progress task, a comment, a draft
tool connection and a pending connection card. Each operation gets the credential of its security scheme; path
parameters are drawn from the seeded objects' ids as well as random uuids (so both the 2xx and the 404 answers are
exercised). With either kind of credential (a bearer API key or run token; the board's session cookie with its CSRF
header, sent as headers so the auth checks can take them away) every schemathesis check runs with its default
settings, on generated bodies the document allows (which must be accepted: 2xx, or a refusal about credentials,
existence or state, 401/403/404/409/429) and on bodies that break it (which must be refused).

Nothing is excluded or filtered: no exception list, no expected statuses widened, no check left out. So the document
states every rule a door applies to a body (text without NUL, trimmed lengths, enums, the MCP message forms); rules
that depend on state answer 404/409. The card is answered (decline/complete) at most once and later answers are the
documented 409; a comment wakes the agent with a queued run, which leaves the running run and its token valid.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import requests
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from app import register_blueprints
from app.services.accounts import create_api_key
from app.services.runs.tokens import mint_run_token, open_run
from app.web.openapi.document import documented_operations
from tests.conftest import serving, sign_in
from tests.factories import DEFAULT_PASSWORD

DOC_PATH = "/api/openapi.json"
MCP_BODIES = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 3, "method": "ping"},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]
# Messages each door refuses with a documented 400 (or answers 202: a client's response has no method).
MCP_REFUSED = [
    {"jsonrpc": "2.0", "id": 6, "method": 5},
    {"jsonrpc": "2.0", "id": 7, "method": "ping", "params": []},
    {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "x\u0000"}},
    {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "\ud800"}},
    {"jsonrpc": "2.0", "id": 10, "result": {}},
    {"jsonrpc": "2.0", "id": 12},
    [],
]
# Batches (revision 2025-03-26, which both doors speak without a version header): an array of answers, or 202.
MCP_BATCHES = [
    [
        {"jsonrpc": "2.0", "id": 13, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        5,
    ],
    [{"jsonrpc": "2.0", "method": "notifications/initialized"}],
]
# Valid bodies for the hand-written cases on the seeded objects (operations not listed send no body).
SEEDED_BODIES = {
    ("post", "/api/issues/{issue_id}/comments"): [{"body": "A seeded comment <b>hi</b>"}],
    ("post", "/api/companies/{company_id}/tools/apps/connect"): [
        {"appSlug": "github", "name": "Fuzzed", "identity": "organization"},
        {"appSlug": "no-such-app"},
    ],
    ("post", "/api/companies/{company_id}/tools/apps/{connection_id}/finish"): [{"credentials": {}}],
    ("patch", "/api/tool-connections/{connection_id}"): [
        {"name": "Renamed", "audience": {"allAgents": True, "agentIds": []}},
        {"enabled": True},
        {"enabled": None},
        {"toolPolicies": None},
        {"enabled": "yes"},
        {"agentInstructions": None},
    ],
    ("post", "/api/tools/oauth/{connection_id}/start"): [{}],
    # "{name}" values are filled with the seeded object's id (`_filled`).
    ("post", "/api/tool-connections/{connection_id}/dry-run"): [
        {"agentId": "{agent_id}", "tool": "save_memory", "arguments": {"content": "x", "workspace_id": "y"}},
        {"agentId": "{agent_id}", "tool": "save_memory", "arguments": []},
    ],
    ("post", "/api/connection-intents/{interaction_id}/phase"): [
        {"phase": "authorizing"},
        {"phase": "bogus"},
    ],
    ("post", "/api/connection-intents/{interaction_id}/complete"): [
        {"connectionId": "00000000-0000-4000-8000-000000000000"}
    ],
    ("post", "/api/connection-intents/{interaction_id}/decline"): [{"reason": "Not now"}],
    ("post", "/runtime-tools/connections/search"): [{"query": ""}, {"query": "notion"}],
    ("post", "/runtime-tools/connections/request"): [{"service": "github"}, {"service": "nope"}],
    ("post", "/mcp/runtime-tools"): [
        *MCP_BODIES,
        *MCP_REFUSED,
        *MCP_BATCHES,
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "connections_search"}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "connection_request"}},
    ],
    ("post", "/mcp/gateway"): [
        *MCP_BODIES,
        *MCP_REFUSED,
        *MCP_BATCHES,
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "github__search", "arguments": {}},
        },
    ],
}
MAX_EXAMPLES = 30
CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {
            "mode": "all",
            "max-examples": MAX_EXAMPLES,
            "deterministic": True,
            # Credentials are set per operation below, from its security scheme.
            "with-security-parameters": False,
        },
    }
)
HYPOTHESIS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def live(app, db, make):
    """A seeded company and a live server on 127.0.0.1:<free port> (stopped after the test)."""
    company = make.company("Fuzz Co")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Fuzzer")
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    comment = make.comment(issue, owner, "Seeded comment")
    _key, api_key = create_api_key(owner, "schemathesis")
    run = open_run(agent, issue)
    db.session.commit()
    run_token = mint_run_token(run).token

    board = app.test_client()
    csrf = sign_in(board, owner)
    draft = board.post(
        f"/api/companies/{company.id}/tools/apps/connect",
        json={"appSlug": "honcho", "identity": "organization", "methodConfig": {"workspaceId": "team"}},
        headers={"X-CSRFToken": csrf},
    )
    assert draft.status_code == 201, draft.json
    card = app.test_client().post(
        "/runtime-tools/connections/request",
        json={"service": "notion"},
        headers={"Authorization": f"Bearer {run_token}"},
    )
    assert card.status_code == 200 and card.json["state"] == "needs_user_action", card.json

    with serving(app) as base:
        yield SimpleNamespace(
            base_url=base,
            owner=owner,
            api_key=api_key,
            run_token=run_token,
            ids={
                "company_id": str(company.id),
                "issue_id": str(issue.id),
                "comment_id": str(comment.id),
                "run_id": str(run.id),
                "connection_id": draft.json["id"],
                "interaction_id": card.json["interactionId"],
                "agent_id": str(agent.id),
                "tool_name": "save_memory",
            },
        )


@pytest.fixture
def api_schema(live):
    served = requests.get(f"{live.base_url}{DOC_PATH}", timeout=10)
    assert served.status_code == 200
    schema = schemathesis.openapi.from_dict(served.json(), config=CONFIG)
    schema.config.update(base_url=live.base_url)
    return schema


@pytest.fixture
def signed_in_headers(live):
    """A browser's credentials: the session cookie from the login form, and the CSRF token the signed-in page hands
    to htmx. Sent as headers (not a cookie jar), so the checks that remove credentials can remove them."""
    session = requests.Session()
    login = session.get(f"{live.base_url}/login", timeout=10).text
    csrf = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', login).group(1)
    response = session.post(
        f"{live.base_url}/login",
        data={"csrf_token": csrf, "email": live.owner.email, "password": DEFAULT_PASSWORD},
        allow_redirects=False,
        timeout=10,
    )
    assert response.status_code == 303, response.text[:500]
    page = session.get(f"{live.base_url}/", timeout=10).text
    return {
        "Cookie": f"session={session.cookies['session']}",
        "X-CSRFToken": re.search(r'"X-CSRFToken": "([^"]+)"', page).group(1),
    }


def _bearer_for(case, live) -> dict:
    schemes = {name for requirement in case.operation.definition.raw["security"] for name in requirement}
    if "runToken" in schemes:
        return {"Authorization": f"Bearer {live.run_token}"}
    if "apiKey" in schemes:
        return {"Authorization": f"Bearer {live.api_key}"}
    return {}


def _documented_operations() -> list:
    """(method, path) of every documented operation of the app's routes (a bare app: collection needs them early)."""
    routes = Flask("routes")
    register_blueprints(routes)
    ops = documented_operations(routes)
    return [pytest.param(op.method, op.path, id=f"{op.method.upper()} {op.path}") for op in ops]


def _seeded_cases(operation, live) -> list:
    """Hand-written cases on the seeded objects, so every operation also takes its success path."""
    path_parameters = {name: live.ids[name] for name in re.findall(r"{([^}]+)}", operation.path)}
    bodies = SEEDED_BODIES.get((operation.method.lower(), operation.path), [None])
    return [
        operation.Case(
            path_parameters=path_parameters, **({} if body is None else {"body": _filled(body, live.ids)})
        )
        for body in bodies
    ]


def _filled(body, ids: dict):
    """A seeded body with every string value `"{name}"` replaced by the seeded object's id `ids[name]`."""
    if isinstance(body, dict):
        return {key: _filled(value, ids) for key, value in body.items()}
    if isinstance(body, str) and body[:1] == "{" and body[-1:] == "}" and body[1:-1] in ids:
        return ids[body[1:-1]]
    return body


def _run(schema, method: str, path: str, live, call_kwargs, checks=None, negative=False) -> None:
    operation = schema.find_operation_by_path(method, path)
    if operation is None:
        pytest.skip(f"{method.upper()} {path} is not served by this app")
    for case in _seeded_cases(operation, live):
        case.call_and_validate(checks=checks, timeout=30, **call_kwargs(case))

    seeded = {name: live.ids[name] for name in re.findall(r"{([^}]+)}", operation.path)}
    # On the seeded objects (the success and state-conflict answers), on random uuids (404), and bodies that break
    # the document on the seeded objects (they must be refused: negative_data_rejection).
    strategies = [operation.as_strategy(path_parameters=seeded), operation.as_strategy()]
    if negative:
        strategies.append(operation.as_strategy(GenerationMode.NEGATIVE, path_parameters=seeded))
    strategy = st.one_of(strategies)

    @HYPOTHESIS
    @given(case=strategy)
    def generated(case):
        case.call_and_validate(checks=checks, timeout=30, **call_kwargs(case))

    generated()


@pytest.mark.parametrize(("method", "path"), _documented_operations())
def test_operation_with_bearer_credentials(api_schema, live, method, path):
    """Board API with the API key, runtime routes and MCP with the run token, the document itself without."""
    _run(
        api_schema,
        method,
        path,
        live,
        call_kwargs=lambda case: {"headers": _bearer_for(case, live)},
        checks=None,
        negative=True,
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [p for p in _documented_operations() if p.values[1].startswith("/api/") and p.values[1] != DOC_PATH],
)
def test_board_operation_with_session_cookie_and_csrf(api_schema, live, signed_in_headers, method, path):
    """The board API as the browser calls it: the session cookie, plus the CSRF header on state changes."""
    _run(
        api_schema, method, path, live, call_kwargs=lambda case: {"headers": signed_in_headers}, negative=True
    )
