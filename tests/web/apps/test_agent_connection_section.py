"""The agent's Instructions tab lists its connections' instructions read-only, with notes when they won't apply."""

from app.catalog.loader import get_app, template_default
from tests.conftest import sign_in
from tests.factories import Factory


def honcho_connection(db, company, *, name, workspace=None, enabled=True):
    honcho = get_app("honcho")
    setting = {**template_default(honcho), "enabled": enabled}
    return Factory(db).connection(
        company,
        slug="honcho",
        name=name,
        instructions=setting,
        config={
            "connectionMethodKey": honcho.methods[0].key,
            "methodConfig": {"workspaceId": workspace} if workspace else {},
        },
    )


def test_from_connections_section_shows_sources_and_amber_notes(client, db, make):
    company = make.company("Acme")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Builder")
    ready = honcho_connection(db, company, name="Team memory", workspace="team")
    unconfigured = honcho_connection(db, company, name="Old memory")
    off = honcho_connection(db, company, name="Muted memory", workspace="team", enabled=False)
    sign_in(client, owner)
    html = client.get(f"/agents/{agent.id}/instructions").get_data(as_text=True)
    assert "From connections" in html
    for connection in (ready, unconfigured, off):
        assert f"/apps/{connection.id}/permissions" in html
    assert "Access can depend on the task’s responsible person and action permissions." in html
    assert "Complete this connection’s configuration before agents receive its instructions." in html
    assert "These instructions are turned off for this connection." in html
    other = make.company("Elsewhere")
    honcho_connection(db, other, name="Secret memory", workspace="x")
    assert "Secret memory" not in client.get(f"/agents/{agent.id}/instructions").get_data(as_text=True)
