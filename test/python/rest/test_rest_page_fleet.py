"""The operator page at fleet scale (151 RSEs, as CMSWEB's partitions hold), rendered by headless Chromium:
totals on top, filter, sort and paging; counts on the state bars; charts whose axes are not clipped; usable on
a phone's narrow screen. Screenshots of both sizes are kept in the test's folder (looked at by eye too)."""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from pymongo import MongoClient

from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.history import day_of
from rest_kit import mounted, seed_rse
from test_rest_page import render

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE = "/ms-unmerged-fleet"
TIERS = ["T1", "T2", "T2", "T3"]


def name(i: int) -> str:
    tier = TIERS[i % 4]
    return f"{tier}_{'US' if i % 3 == 0 else 'DE'}_Site{i:03d}" + ("_Disk" if tier == "T1" else "")


@pytest.fixture(scope="module")
def fleet(rest_app: Any, mongo_client: MongoClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    mongo_client.drop_database("msunmerged_rest_fleet")
    db = mongo_client["msunmerged_rest_fleet"]
    work = tmp_path_factory.mktemp("fleet-plans")
    gen = time.time() - 3600
    for i in range(151):  # every 10th RSE has failures: 16 failing
        seed_rse(db, name(i), work, [f"/store/unmerged/R/P/RAW/v1/f{n}.root" for n in range(4 + i % 7)]
                 + ["/store/unmerged/R/K/RAW/v1/k.root"], ["/store/unmerged/R/K"], gen,
                 done_jobs=1, outcome=lambda n, lfn, i=i: {"state": "failed", "error_class": "timeout"}
                 if i % 10 == 0 and n == 0 else {"state": "deleted", "size": 10 ** 6},
                 state="done_with_errors" if i % 10 == 0 else "clean", reason="files_failed" if i % 10 == 0 else "")
    for back, deleted in ((9, 741_181), (8, 12_000), (2, 500_000)):  # a gap of five days between
        Ledger(db).history.record_job(name(1), f"{name(1)}:old:{back}", day_of(time.time() - back * 86400),
                                      {"states": {"deleted": deleted}, "bytes_freed": deleted * 3_000_000,
                                       "failed_by_class": {}})
    yield from mounted(rest_app, db, BASE)


def rows(dom: str) -> list[str]:
    table = dom[dom.index('<table id="rses">'):]
    table = table[:table.index("</table>")]
    return re.findall(r'<a href="[^"]*/rse\?name=[^"]+">([^<]+)</a>', table)


def screenshot(chromium: str, url: str, tmp: Path, size: str, out: Path) -> None:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
             f"--user-data-dir={tmp / 'profile'}"]
    subprocess.run([chromium, *flags, f"--screenshot={out}", f"--window-size={size}", url],
                   capture_output=True, timeout=120, check=True)
    assert out.stat().st_size > 10_000


def test_totals_paging_and_the_default_order(fleet: str, chromium: str, tmp_path: Path) -> None:
    dom = render(chromium, fleet + "/", tmp_path)
    totals = dom[dom.index('id="totals"'):]
    assert "<b>151</b>RSEs" in totals[:600] and "<b>16</b>failing" in totals[:600]
    shown = rows(dom)
    assert len(shown) == 50 and shown == sorted(shown)  # first page of 50, by name
    assert "RSEs 1-50 of 151" in dom and "page 1 of 4" in dom
    page4 = rows(render(chromium, fleet + "/?page=4", tmp_path))
    assert len(page4) == 1 and page4[0] == sorted(name(i) for i in range(151))[-1]
    # The state bars of the page's RSEs carry their counts.
    assert dom.count('class="bar-total"') == 50 and re.search(r'class="bar-total"[^>]*>\d+ files<', dom)


def test_filter_and_sort(fleet: str, chromium: str, tmp_path: Path) -> None:
    failing = rows(render(chromium, fleet + "/?failing=1&per=100", tmp_path))
    assert sorted(failing) == sorted(name(i) for i in range(0, 151, 10))
    t1 = rows(render(chromium, fleet + "/?tier=T1&per=100", tmp_path))
    assert t1 and all(n.startswith("T1_") for n in t1) and len(t1) == len(range(0, 151, 4))
    clean_t3 = rows(render(chromium, fleet + "/?tier=T3&state=clean&per=100", tmp_path))
    assert clean_t3 and all(n.startswith("T3_") for n in clean_t3)
    by_deleted = rows(render(chromium, fleet + "/?sort=to_delete&order=desc&per=200", tmp_path))
    sizes = {name(i): 4 + i % 7 for i in range(151)}
    assert [sizes[n] for n in by_deleted] == sorted(sizes.values(), reverse=True)


def test_history_axis_gaps_and_units(fleet: str, chromium: str, tmp_path: Path) -> None:
    dom = render(chromium, fleet + "/", tmp_path)
    chart = dom[dom.index('class="chart chart-history"'):]
    chart = chart[:chart.index("</svg>")]
    top = re.search(r'class="axis-top"[^>]*>([^<]+)<', chart)
    x = float(re.search(r'<text x="([\d.]+)"[^>]*class="axis-top"', chart).group(1))
    assert top.group(1) == "741,181" and x - 6.5 * len("741,181") > 0  # the whole label inside the chart
    assert "files / day" in chart and "bytes freed / day" in chart and "freed: up to" not in chart
    assert chart.count('class="line-bytes"') == 3  # three runs of days with data: the line breaks at the gaps
    assert chart.count('class="bar-deleted"') == 3 + 1  # the three old days and today's seeded jobs


def test_screenshots_desktop_and_phone(fleet: str, chromium: str, tmp_path: Path) -> None:
    keep = Path(__file__).resolve().parents[3] / "test" / ".servers" / "screenshots"
    keep.mkdir(parents=True, exist_ok=True)
    screenshot(chromium, fleet + "/?failing=1", tmp_path, "1400,1400", keep / "fleet-desktop.png")
    screenshot(chromium, fleet + "/", tmp_path, "390,1600", keep / "fleet-phone.png")
    dom = render(chromium, fleet + "/", tmp_path)
    assert '<meta name="viewport" content="width=device-width">' in dom and 'class="scroll"' in dom
