"""serve's database watch on its own: when liveness fails, what it logs while the database is silent."""
from __future__ import annotations

import logging
from typing import Optional

import pytest

from MSUnmerged import dbwatch
from MSUnmerged.dbwatch import DatabaseWatch


class Database:
    """A ping that fails while `down` says so (the watch's only contact with the database)."""

    def __init__(self) -> None:
        self.down: Optional[Exception] = None

    def ping(self) -> None:
        if self.down is not None:
            raise self.down


def test_liveness_fails_after_db_dead_s_and_recovers(monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    db, now = Database(), [1000.0]
    monkeypatch.setattr(dbwatch.time, "monotonic", lambda: now[0])
    watch = DatabaseWatch(db.ping, None, dead_after_s=30.0)
    watch.check()
    db.down = ConnectionError("connection refused")
    with caplog.at_level(logging.WARNING, "MSUnmerged.dbwatch"):
        for _ in range(20):  # a ping every 2 s for 40 s
            now[0] += 2.0
            watch.check()
            assert (watch.dead() is not None) == (watch.silent_s() > 30.0)
        assert "rest.db_dead_s = 30" in watch.dead()
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and "not answering for 2 s" in lines[0]  # then one a minute, not every ping
        db.down = None
        now[0] += 2.0
        watch.check()
    assert watch.dead() is None and "answers again after 42 s" in caplog.records[-1].getMessage()


def test_liveness_never_depends_on_the_database_with_db_dead_s_0() -> None:
    db = Database()
    db.down = ConnectionError("refused")
    watch = DatabaseWatch(db.ping, None, dead_after_s=0.0)
    watch.last_answer -= 10_000
    watch.check()
    assert watch.dead() is None
