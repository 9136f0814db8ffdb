"""`msunmerged status` on a fixed fleet at a fixed time prints the golden file's text (golden_kit): every RSE, each
RSE in detail, an empty ledger, and the JSON envelope."""
from __future__ import annotations

import argparse
import contextlib

import pytest

from MSUnmerged.cli import EXIT_OK, status
from MSUnmerged.config import Config
from golden_kit import FixedView, assert_golden, fixed_clock  # noqa: F401  (a fixture)

pytestmark = pytest.mark.usefixtures("fixed_clock")


def test_status_prints_the_golden_text(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    config = Config()
    config.service.dry_run = False
    config.service.interval_s, config.service.alert_after_cycles = 1800, 1  # last good cycle: 65 min ago, an alert
    fleet = FixedView()
    cases = [(FixedView(0), None, False), (fleet, None, False), (fleet, None, True),
             *((fleet, name, False) for name in fleet.docs)]
    out = []
    for view, rse, json in cases:
        monkeypatch.setattr(status, "ledger_view", contextlib.contextmanager(lambda _: iter([view])))
        assert status.run(argparse.Namespace(rse=rse, json=json), config) == EXIT_OK
        out.append(f"$ status{' --rse ' + rse if rse else ''}{' --json' if json else ''}\n{capsys.readouterr().out}")
    assert_golden("status.golden", "".join(out))
