"""Secrets generated into the instance folder: created once, kept, and agreed on by processes starting together."""

from __future__ import annotations

import os
import stat
import threading

from app.config import _instance_secret


def test_a_secret_is_generated_once_with_owner_only_mode_and_read_back(tmp_path):
    instance = tmp_path / "instance"
    first = _instance_secret(instance, "secret_key", lambda: "generated")
    again = _instance_secret(instance, "secret_key", lambda: "another")
    assert (first, again) == ("generated", "generated")
    assert stat.S_IMODE(os.stat(instance / "secret_key").st_mode) == 0o600
    assert sorted(p.name for p in instance.iterdir()) == ["secret_key"]


def test_a_process_that_loses_the_race_reads_the_winners_secret(tmp_path):
    """Another process publishes its secret between this one's check and its write: this one adopts it."""
    instance = tmp_path / "instance"

    def make_while_another_process_publishes() -> str:
        (instance / "secret_key").write_text("the winner's")
        return "the loser's"

    value = _instance_secret(instance, "secret_key", make_while_another_process_publishes)
    assert value == "the winner's"
    assert (instance / "secret_key").read_text() == "the winner's"
    assert sorted(p.name for p in instance.iterdir()) == ["secret_key"]


def test_threads_starting_together_all_get_the_one_secret(tmp_path):
    instance = tmp_path / "instance"
    start = threading.Barrier(8)
    values: list[str] = []

    def start_up(number: int) -> None:
        start.wait()
        values.append(_instance_secret(instance, "secret_key", lambda: f"secret {number}"))

    threads = [threading.Thread(target=start_up, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(values) == 8
    assert set(values) == {(instance / "secret_key").read_text()}
