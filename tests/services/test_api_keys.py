"""Personal API keys: created on the page or the CLI, shown once, stored hashed, usable as bearer, revocable."""

from __future__ import annotations

import hashlib
import json
import re

from sqlalchemy import select, text

from app.models import ApiKey
from app.services.accounts import create_api_key
from tests.conftest import sign_in


def shown_token(html: str) -> str:
    field = re.search(r'<input[^>]*id="new-api-key"[^>]*>', html)
    assert field, "the new key is not shown"
    return re.search(r'value="([^"]+)"', field.group(0)).group(1)


def raw_key_rows(db) -> list[dict]:
    """The stored rows as the database holds them, every column as text."""
    db.session.expire_all()
    rows = db.session.execute(text("SELECT * FROM api_keys")).mappings().all()
    return [{k: (str(v) if v is not None else None) for k, v in row.items()} for row in rows]


def test_key_lifecycle_on_the_page(app, client, db, make):
    company = make.company()
    user = make.member(company, "member")
    issue = make.issue(company, title="Visible through the API")
    csrf = sign_in(client, user)

    created = client.post("/settings/api-keys", data={"name": "laptop", "csrf_token": csrf})
    assert created.status_code == 201
    html = created.get_data(as_text=True)
    token = shown_token(html)
    assert token.startswith("sbk_")
    assert "It will not be shown again." in html

    # Only the hash is stored: the token appears in no column of the row.
    rows = raw_key_rows(db)
    assert len(rows) == 1
    row = rows[0]
    assert row["token_hash"] == hashlib.sha256(token.encode()).hexdigest()
    assert all(token not in (value or "") for value in row.values())
    assert row["name"] == "laptop"

    # The list shows the prefix, never the token again.
    listing = client.get("/settings/api-keys").get_data(as_text=True)
    assert token not in listing
    assert "laptop" in listing
    assert row["token_prefix"] in listing

    api = app.test_client()
    headers = {"Authorization": f"Bearer {token}"}
    got = api.get(f"/api/issues/{issue.id}", headers=headers)
    assert got.status_code == 200
    assert got.json["title"] == "Visible through the API"
    listed = api.get(f"/api/companies/{company.id}/issues", headers=headers)
    assert [i["id"] for i in listed.json["issues"]] == [str(issue.id)]
    db.session.expire_all()
    key = db.session.scalar(select(ApiKey))
    assert key.last_used_at is not None  # read-only calls still record the key's use
    key_id = key.id
    revoked = client.post(f"/settings/api-keys/{key_id}/revoke", data={"csrf_token": csrf})
    assert revoked.status_code == 303
    assert revoked.headers["Location"] == "/settings/api-keys"
    assert "Revoked" in client.get("/settings/api-keys").get_data(as_text=True)

    after = api.get(f"/api/issues/{issue.id}", headers=headers)
    assert after.status_code == 401
    assert after.json == {"error": "Authentication required"}
    post = api.post(f"/api/issues/{issue.id}/comments", json={"body": "x"}, headers=headers)
    assert post.status_code == 401


def test_key_name_is_required(client, db, make):
    user = make.member(make.company(), "member")
    csrf = sign_in(client, user)
    response = client.post("/settings/api-keys", data={"name": "", "csrf_token": csrf})
    assert response.status_code == 422
    assert 'class="field-error"' in response.get_data(as_text=True)
    assert raw_key_rows(db) == []


def test_a_key_cannot_be_revoked_by_someone_else(client, db, make):
    company = make.company()
    owner = make.member(company, "owner")
    other = make.member(company, "owner")
    key, _token = create_api_key(owner, "mine")
    db.session.commit()
    csrf = sign_in(client, other)
    response = client.post(f"/settings/api-keys/{key.id}/revoke", data={"csrf_token": csrf})
    assert response.status_code == 404
    db.session.expire_all()
    assert db.session.get(ApiKey, key.id).revoked_at is None


def test_keys_page_lists_only_my_keys(client, db, make):
    company = make.company()
    me = make.member(company, "member")
    someone = make.member(company, "member")
    create_api_key(someone, "their key")
    create_api_key(me, "my key")
    db.session.commit()
    sign_in(client, me)
    html = client.get("/settings/api-keys").get_data(as_text=True)
    assert "my key" in html
    assert "their key" not in html


def test_cli_creates_a_working_key(app, db, make):
    company = make.company()
    user = make.member(company, "member", user=make.user(email="cli@example.com"))
    issue = make.issue(company, title="CLI task")
    result = app.test_cli_runner().invoke(args=["api-keys", "create", "--email", "CLI@example.com", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) == {"token", "id", "name"}
    assert data["name"] == "CLI key"
    token = data["token"]
    assert token.startswith("sbk_")
    rows = raw_key_rows(db)
    assert [r["user_id"].replace("-", "") for r in rows] == [user.id.hex]
    assert all(token not in (value or "") for value in rows[0].values())
    got = app.test_client().get(f"/api/issues/{issue.id}", headers={"Authorization": f"Bearer {token}"})
    assert got.status_code == 200
    assert got.json["title"] == "CLI task"


def test_cli_refuses_an_unknown_email(app, db):
    result = app.test_cli_runner().invoke(
        args=["api-keys", "create", "--email", "ghost@example.com", "--json"]
    )
    assert result.exit_code != 0
    assert "No user with email ghost@example.com" in result.output
    assert raw_key_rows(db) == []
