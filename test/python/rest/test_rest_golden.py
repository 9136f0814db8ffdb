"""The RSE page and /metrics of a fixed fleet at a fixed time are the golden files' (golden_kit): a restructuring
of either changes nothing the operator or Prometheus reads."""
from __future__ import annotations

import pytest

from MSUnmerged import __version__ as VERSION
from MSUnmerged.config import Config
from MSUnmerged.rest import metrics
from MSUnmerged.rest.page import Context, rse_page
from golden_kit import FixedView, assert_golden, fixed_clock  # noqa: F401  (a fixture)

pytestmark = pytest.mark.usefixtures("fixed_clock")


def test_the_rse_pages_are_the_golden_ones() -> None:
    view = FixedView()
    ctx = Context(base="/ms-unmerged", dry_run=False, operations_url="https://example.org/operations")
    pages = [rse_page(view, ctx, name) for name in view.docs]
    assert rse_page(view, ctx, "T2_XX_Unknown") is None
    assert_golden("rse_pages.html", "\n<!-- the next RSE -->\n".join(p or "" for p in pages) + "\n")


def test_the_metrics_are_the_golden_ones() -> None:
    config = Config()
    config.service.dry_run = False
    config.service.interval_s, config.service.alert_after_cycles = 1800, 1  # last good cycle: 65 min ago, an alert
    text = metrics.render(FixedView(), config)
    assert_golden("metrics.txt", text.replace(f'version="{VERSION}"', 'version="<version>"'))  # a release keeps it
