"""The providers' breakers in the database (`shared_breakers.DatabaseBreakers`): two stores on their own
connections stand in for two server processes (tests/system/test_shared_breaker.py runs two real servers)."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from app.adapters.providers import limits as provider_limits
from app.models import ProviderBreaker
from app.services.connections.shared_breakers import DatabaseBreakers

KEY = "http://127.0.0.1:9/mcp"


def _limits(db, threshold: int = 3) -> tuple[provider_limits.Limits, provider_limits.Limits]:
    return tuple(  # type: ignore[return-value]
        provider_limits.Limits(
            failure_threshold=threshold, reset_seconds=600, shared=DatabaseBreakers(db.engine)
        )
        for _ in range(2)
    )


def _time_out(limits: provider_limits.Limits) -> None:
    with provider_limits.slot(KEY, limits) as call:
        call.timed_out()


def _answer(limits: provider_limits.Limits) -> None:
    with provider_limits.slot(KEY, limits):
        pass


def test_timeouts_in_two_processes_add_up_and_an_answer_resets_them(db):
    one, two = _limits(db)
    _time_out(one)
    _time_out(two)
    _answer(one)  # consecutive timeouts only: an answer anywhere starts the count again
    assert db.session.scalars(select(ProviderBreaker)).all() == []
    _time_out(two)
    _time_out(one)
    _time_out(two)
    for limits in (one, two):
        with pytest.raises(provider_limits.Paused) as paused:
            _answer(limits)
        assert paused.value.timeouts == 3 and 0 < paused.value.retry_after <= 600


def test_after_the_pause_exactly_one_process_gets_the_trial(db):
    one, two = _limits(db, threshold=1)
    _time_out(one)
    db.session.execute(update(ProviderBreaker).values(open_until=0.0))  # the pause is over
    db.session.commit()
    trial, seen = one.shared.admit(KEY, one)  # type: ignore[union-attr]
    assert (trial, seen) == (True, True)
    with pytest.raises(provider_limits.Paused):
        two.shared.admit(KEY, two)  # type: ignore[union-attr]
    one.shared.settle(KEY, one, timed_out=False, trial=True, seen=True)  # type: ignore[union-attr]
    _answer(two)  # closed again for everyone
    db.session.expire_all()
    assert db.session.scalars(select(ProviderBreaker)).all() == []
