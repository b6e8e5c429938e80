"""Runtime-tools tokens: minting, verification, and run re-validation on every use (over the REST door).

Also the `switchboard runs open|close` commands. The door helpers they share with other modules are in tests/doors.py.
"""

from __future__ import annotations

import json
import time
import uuid

import jwt
import pytest

from app.models import HeartbeatRun
from app.services.runs.tokens import company_key, instance_id, mint_run_token, verify_run_token
from tests.doors import REQUEST_URL, SEARCH_URL, TOKEN_INVALID, bearer, search


def forge(claims: dict, key: bytes, alg: str = "HS256") -> str:
    return jwt.encode(claims, key, algorithm=alg)


def base_claims(world) -> dict:
    now = int(time.time())
    return {
        "sub": str(world.agent.id),
        "company_id": str(world.company.id),
        "run_id": str(world.run.id),
        "responsible_user_id": str(world.owner.id),
        "scope": "connection_intents",
        "iat": now,
        "exp": now + 3600,
        "instance_id": instance_id(),
    }


def test_minted_token_carries_the_run_claims_and_expires_in_an_hour(world):
    claims = verify_run_token(world.token)
    assert claims["sub"] == str(world.agent.id)
    assert claims["company_id"] == str(world.company.id)
    assert claims["run_id"] == str(world.run.id)
    assert claims["responsible_user_id"] == str(world.owner.id)
    assert claims["scope"] == "connection_intents"
    assert claims["instance_id"] == instance_id()
    assert claims["exp"] - claims["iat"] == 3600
    assert jwt.get_unverified_header(world.token) == {"alg": "HS256", "typ": "JWT"}


def test_valid_token_is_accepted(client, world):
    response = search(client, world.token)
    assert response.status_code == 200 and response.json["version"] == 1


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer"}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer a.b.c"}],
)
def test_missing_or_malformed_token_is_401(client, world, headers):
    for url, body in ((SEARCH_URL, {}), (REQUEST_URL, {"service": "github"})):
        response = client.post(url, json=body, headers=headers)
        assert response.status_code == 401 and response.json == TOKEN_INVALID


def test_lowercase_bearer_scheme_is_accepted(client, world):
    response = client.post(SEARCH_URL, json={}, headers={"Authorization": f"bearer {world.token}"})
    assert response.status_code == 200


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(
            lambda c, w: ({**c, "exp": int(time.time()) - 5}, company_key(w.company.id)), id="expired"
        ),
        pytest.param(
            lambda c, w: ({**c, "scope": "github_credentials"}, company_key(w.company.id)), id="scope"
        ),
        pytest.param(
            lambda c, w: ({**c, "instance_id": "elsewhere"}, company_key(w.company.id)), id="instance"
        ),
        pytest.param(lambda c, w: (c, b"x" * 32), id="wrong-key"),
        pytest.param(lambda c, w: (c, company_key(uuid.uuid4())), id="other-company-key"),
        pytest.param(lambda c, w: ({**c, "run_id": 7}, company_key(w.company.id)), id="non-string-claim"),
        pytest.param(
            lambda c, w: ({k: v for k, v in c.items() if k != "exp"}, company_key(w.company.id)), id="no-exp"
        ),
    ],
)
def test_bad_tokens_are_401(client, world, mutate):
    claims, key = mutate(base_claims(world), world)
    response = search(client, forge(claims, key))
    assert response.status_code == 401 and response.json == TOKEN_INVALID


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_other_algorithms_and_tampering_are_401(client, world):
    claims = base_claims(world)
    key = company_key(world.company.id)
    assert search(client, forge(claims, key, "HS512")).status_code == 401
    unsigned = jwt.encode(claims, None, algorithm="none")
    assert search(client, unsigned).json == TOKEN_INVALID
    header, payload, signature = world.token.split(".")
    flipped = signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")
    assert search(client, f"{header}.{payload}.{flipped}").status_code == 401
    # A token for another company's run, re-labelled with this company's id, fails the signature.
    other = {**claims, "company_id": str(uuid.uuid4())}
    relabelled = forge(other, company_key(world.company.id))
    assert search(client, relabelled).status_code == 401


def test_token_must_match_its_run(client, db, make, world):
    key = company_key(world.company.id)
    other_agent = make.agent(world.company, "Other")
    mismatch = {"error": "Runtime tool token does not match its heartbeat run"}
    for change in (
        {"sub": str(other_agent.id)},
        {"run_id": str(uuid.uuid4())},
        {"run_id": "not-a-uuid"},
        {"responsible_user_id": str(uuid.uuid4())},
    ):
        response = search(client, forge({**base_claims(world), **change}, key))
        assert response.status_code == 403 and response.json == mismatch, change


def test_ended_run_token_stops_working(client, db, world):
    world.run.status = "succeeded"
    db.session.commit()
    response = search(client, world.token)
    assert response.status_code == 403
    assert response.json == {"error": "Runtime tool token is no longer active"}


def test_run_context_checks_in_order(client, db, make, world):
    # No responsible person on the task.
    lonely = make.issue(world.company, status="in_progress", assignee=world.agent)
    _run, token = make.run(world.agent, lonely)
    response = search(client, token)
    assert response.status_code == 403
    assert response.json == {"error": "This task needs a responsible user to connect a service"}

    # A run with no bound task.
    unbound = HeartbeatRun(
        company_id=world.company.id,
        agent_id=world.agent.id,
        responsible_user_id=world.owner.id,
        status="running",
        context_snapshot={},
    )
    db.session.add(unbound)
    db.session.commit()
    response = search(client, mint_run_token(unbound).token)
    assert response.status_code == 422
    assert response.json == {"error": "Connection requests require a task-bound heartbeat run"}

    # Reassigned task.
    other = make.agent(world.company, "Other")
    world.issue.assignee_agent_id = other.id
    db.session.commit()
    response = search(client, world.token)
    assert response.status_code == 409
    assert response.json == {"error": "The requesting agent no longer owns this task"}
    world.issue.assignee_agent_id = world.agent.id

    # Closed task.
    world.issue.status = "done"
    db.session.commit()
    response = client.post(REQUEST_URL, json={"service": "github"}, headers=bearer(world.token))
    assert response.status_code == 409
    assert response.json == {"error": "Connection requests cannot be created on a closed task"}
    world.issue.status = "in_progress"

    # Responsible person demoted to viewer (checked before ownership and status).
    make.membership(world.company, world.owner).role = "viewer"
    world.issue.status = "done"
    db.session.commit()
    response = search(client, world.token)
    assert response.status_code == 403
    assert response.json == {"error": "Responsible user is no longer authorized for company write access"}


def test_runs_open_and_close_commands(app, db, make, world):
    member = make.member(world.company, "member")
    runner = app.test_cli_runner()
    result = runner.invoke(
        args=[
            "runs",
            "open",
            "--agent",
            str(world.agent.id),
            "--issue",
            world.issue.identifier,
            "--responsible",
            member.email,
            "--json",
        ]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    env = data["env"]
    base = app.config["PUBLIC_BASE_URL"]
    assert env["PAPERCLIP_RUNTIME_TOOLS_MCP_URL"] == f"{base}/mcp/runtime-tools"
    assert env["PAPERCLIP_RUNTIME_TOOLS_CONNECTIONS_SEARCH_URL"] == f"{base}/runtime-tools/connections/search"
    assert (
        env["PAPERCLIP_RUNTIME_TOOLS_CONNECTION_REQUEST_URL"] == f"{base}/runtime-tools/connections/request"
    )
    assert env["PAPERCLIP_RUNTIME_TOOLS_AVAILABLE"] == "connections_search,connection_request"
    assert env["PAPERCLIP_RUNTIME_TOOLS_TOKEN"] == data["token"]
    assert env["PAPERCLIP_RUNTIME_TOOLS_EXPIRES_AT"] == data["expiresAt"]
    guidance = env["PAPERCLIP_RUNTIME_TOOLS_GUIDANCE"]
    assert "connections_search" in guidance and "http" not in guidance and data["token"] not in guidance
    run = db.session.get(HeartbeatRun, uuid.UUID(data["runId"]))
    assert run.status == "running" and run.issue_id == world.issue.id and run.responsible_user_id == member.id
    assert verify_run_token(data["token"])["run_id"] == data["runId"]

    defaulted = runner.invoke(
        args=["runs", "open", "--agent", str(world.agent.id), "--issue", str(world.issue.id), "--json"]
    )
    default_run = db.session.get(HeartbeatRun, uuid.UUID(json.loads(defaulted.output)["runId"]))
    assert default_run.responsible_user_id == world.owner.id

    closed = runner.invoke(args=["runs", "close", data["runId"]])
    assert closed.exit_code == 0, closed.output
    db.session.expire_all()
    assert db.session.get(HeartbeatRun, uuid.UUID(data["runId"])).status == "succeeded"

    missing = runner.invoke(args=["runs", "open", "--agent", str(uuid.uuid4()), "--issue", "X-1"])
    assert missing.exit_code != 0 and "No such agent" in missing.output
