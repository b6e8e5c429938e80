"""What the two hot paths of the access rule cost the database, cold (nothing kept by this process) and warm:
`connections_search` and the gateway's `tools/list`, for an agent with several connections of every kind.

Issue 28 item 4 made the rule a list of ordered checks (`app/services/access/checks.py`) run in Python over what
the same statements read: these counts were measured before that change and must not grow. They do not depend on
the number of connections or tools.
"""

from __future__ import annotations

import pytest

from app.services.gateway.tools import clear_listings
from app.services.runtime.search import clear_search_indexes
from tests.conftest import count_statements
from tests.doors import rpc, search

# Measured on the commit before the checks (0e50494) and after them: the same. Since then each agent door also reads
# the caller address's shared count of failed authentications (issue 31: +1 per request), and the gateway writes the
# listing's entry in the run's decision timeline (issue 28 item 5: +1 per tools/list); the access rule's own reads
# are unchanged.
THROTTLE, TIMELINE = 1, 1
SEARCH_COLD, SEARCH_WARM = 6 + THROTTLE, 1 + THROTTLE
LISTING_COLD, LISTING_WARM = 4 + THROTTLE + TIMELINE, 1 + THROTTLE + TIMELINE
EXPLAINER = (
    7  # connection, identities, membership, tools, the catalog row's version, quarantined tools, counters
)


@pytest.fixture
def crowded(make, client, db):
    """Builder with connections of every kind: ready, blocked, scoped by a card, someone else's, unhealthy."""
    world = make.task_run(client=client)
    company, owner, agent = world.company, world.owner, world.agent
    other = make.member(company, "member")
    for index in range(3):
        make.connection(
            company,
            name=f"Ready {index}",
            grants=[("organization", None)],
            tools={"read": "allow", "w": None},
        )
    make.connection(company, name="Blocked", grants=[("organization", None)], tools={"drop": "block"})
    make.connection(company, name="Mine", grants=[("agent", agent)], install_for=agent, tools={"x": "allow"})
    make.connection(company, name="Theirs", grants=[("user", other)], tools={"x": "allow"})
    make.connection(
        company, name="Sick", grants=[("organization", None)], health_status="error", tools={"x": None}
    )
    make.connection(company, name="Personal", grants=[("user", owner)], tools={"y": "ask_first"})
    db.session.commit()
    return world


def _measure(db, do):
    with count_statements(db.engine) as statements:
        response = do()
    assert response.status_code == 200, response.get_data(as_text=True)
    return len(statements)


def test_connections_search_reads_as_many_statements_as_before(db, crowded):
    do = lambda: search(crowded.client, crowded.token, "")  # noqa: E731
    do()  # parse the catalog definitions once in this process
    clear_search_indexes()
    assert (_measure(db, do), _measure(db, do)) == (SEARCH_COLD, SEARCH_WARM)


def test_gateway_listing_reads_as_many_statements_as_before(db, crowded):
    do = lambda: rpc(crowded.client, crowded.token, "tools/list")  # noqa: E731
    listed = do().json["result"]["tools"]
    assert sorted(t["name"] for t in listed) == [
        "mine__x",
        "personal__y",
        "ready-0__read",
        "ready-0__w",
        "ready-1__read",
        "ready-1__w",
        "ready-2__read",
        "ready-2__w",
    ]
    clear_listings()
    assert (_measure(db, do), _measure(db, do)) == (LISTING_COLD, LISTING_WARM)


def test_the_explainer_reads_a_constant_number_of_statements(make, db, crowded):
    """The explainer reads one connection: its row with the install columns, its identities, the responsible
    person's membership, its tools, its app's catalog version, its quarantined tools and its used-up limits'
    counters, whatever the company holds."""
    from app.models import ToolConnection
    from app.services.access.explain import explain_access

    agent, owner = crowded.agent, crowded.owner
    ready = db.session.query(ToolConnection).filter_by(name="Ready 0").one()
    explain_access(agent, owner.id, ready)  # the catalog definition parsed once in this process
    with count_statements(db.engine) as few:
        assert explain_access(agent, owner.id, ready).ready
    for index in range(5):
        make.connection(
            crowded.company, name=f"More {index}", grants=[("organization", None)], tools={"t": None}
        )
    db.session.commit()
    _ = (
        agent.id,
        agent.company_id,
        agent.name,
        owner.id,
        ready.id,
        ready.name,
    )  # reload what the commit expired
    with count_statements(db.engine) as many:
        assert not explain_access(agent, owner.id, ready, "drop").ready
    assert len(few) == len(many) == EXPLAINER
