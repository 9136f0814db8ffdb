"""The index page, the RSE page and /metrics of a fixed fleet at a fixed time are the golden files' (golden_kit): a
restructuring of any changes nothing the operator or Prometheus reads."""
from __future__ import annotations

from pathlib import Path

import pytest

from MSUnmerged import __version__ as VERSION
from MSUnmerged.config import Config
from MSUnmerged.rest import metrics
from MSUnmerged.rest.page import Context, index_page, rse_page
from golden_kit import FixedView, assert_golden, fixed_clock  # noqa: F401  (a fixture)

pytestmark = pytest.mark.usefixtures("fixed_clock")


CTX = Context(base="/ms-unmerged", dry_run=False, operations_url="https://example.org/operations",
              folders={"state": Path("/data/state"), "jobs": Path("/data/jobs")})


def test_the_index_pages_are_the_golden_ones() -> None:
    queries = [{}, {"sort": "failed", "order": "desc", "per": "25"}, {"state": "nothing", "failing": "1"}]
    pages = [index_page(FixedView(), CTX, q) for q in queries] + [index_page(FixedView(0), CTX)]
    assert_golden("index_pages.golden", "\n<!-- the next page -->\n".join(pages) + "\n")


def test_the_rse_pages_are_the_golden_ones() -> None:
    view, ctx = FixedView(), CTX
    pages = [rse_page(view, ctx, name) for name in view.docs]
    assert rse_page(view, ctx, "T2_XX_Unknown") is None
    assert_golden("rse_pages.golden", "\n<!-- the next RSE -->\n".join(p or "" for p in pages) + "\n")


def test_the_metrics_are_the_golden_ones() -> None:
    config = Config()
    config.service.dry_run = False
    config.service.interval_s, config.service.alert_after_cycles = 1800, 1  # last good cycle: 65 min ago, an alert
    text = metrics.render(FixedView(), config)
    assert_golden("metrics.golden", text.replace(f'version="{VERSION}"', 'version="<version>"'))  # a release keeps it
