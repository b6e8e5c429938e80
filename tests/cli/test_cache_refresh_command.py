"""`switchboard cache refresh` in one process: every company's access revision rises by one, a company that never
had one included (a revision row restored from a dump may be missing), and the workers are signalled.
Across processes and instances: `tests/system/test_cache_refresh.py`."""

from __future__ import annotations

from sqlalchemy import delete

from app.core import wake_signal
from app.models import AccessRevision
from app.services.access.revision import current_revision


def test_cache_refresh_raises_every_companys_revision_and_wakes_the_workers(app, db, make):
    changed, untouched = make.company(), make.company()
    make.member(changed, "owner")  # a membership raises its company's revision at commit
    db.session.commit()
    db.session.execute(delete(AccessRevision).where(AccessRevision.company_id == untouched.id))
    db.session.commit()
    before = (current_revision(changed.id), current_revision(untouched.id))
    assert before[1] == 0
    woken = {topic: wake_signal.generation((topic,)) for topic in wake_signal.TOPICS}

    result = app.test_cli_runner().invoke(args=["cache", "refresh"])

    assert result.exit_code == 0, result.output
    assert result.output == (
        "cache: raised the access revision of 2 companies; every process answers agents' next requests from the "
        "database\n"
    )
    db.session.expire_all()
    assert (current_revision(changed.id), current_revision(untouched.id)) == (before[0] + 1, 1)
    # Every topic is signalled; on PostgreSQL a listener in this process may count the NOTIFY a second time.
    assert all(wake_signal.generation((topic,)) > woken[topic] for topic in wake_signal.TOPICS), woken
