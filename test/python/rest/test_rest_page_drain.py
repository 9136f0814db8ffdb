"""The operator page tells when the backlog will be gone and shows failures at a glance (issue 39), at fleet scale
(151 RSEs) in headless Chromium, desktop and phone: rate, expected end and next slice per RSE and in total, why an
RSE waits, progress bars split into deleted / failed / pending, failures on their own chart with their numbers
written, the RSE page grouped and labelled for people. The RSE documents are hand-written in the shape the
ledger's `refresh_counters` leaves them (counters, drain samples, the generation's slices: the ledger's own writing
of these is tested in test/python/ledger/test_ledger_job_view.py); the same drain is in data/status and /metrics."""
from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pymongo import MongoClient

from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.history import day_of
from golden_kit import BAD, name, rse_doc
from rest_kit import mounted
from test_rest_page import render
from test_rest_page_fleet import screenshot

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE = "/ms-unmerged-drain"


@pytest.fixture(scope="module")
def fleet(rest_app: Any, mongo_client: MongoClient) -> Iterator[str]:
    mongo_client.drop_database("msunmerged_rest_drain")
    db = mongo_client["msunmerged_rest_drain"]
    now = time.time()
    db.rses.insert_many([rse_doc(i, now) for i in range(151)])
    for back, deleted, failed in ((6, 741_181, 0), (4, 20_000, 1400), (2, 500_000, 37), (0, 9000, 3)):
        Ledger(db).history.record_job(BAD, f"{BAD}:old:{back}", day_of(now - back * 86400),
                                      {"states": {"deleted": deleted}, "bytes_freed": deleted * 3_000_000,
                                       "failed_by_class": {"permission_denied": failed} if failed else {}})
    yield from mounted(rest_app, db, BASE)


def row_of(dom: str, rse: str) -> str:
    row = dom[dom.index(f">{rse}</a>"):]
    return row[:row.index("</tr>")]


def test_the_index_says_when_the_backlog_ends_and_why_rses_wait(fleet: str, chromium: str, tmp_path: Path) -> None:
    dom = render(chromium, fleet + "/?per=200", tmp_path)
    drain = dom[dom.index('id="drain"'):]
    drain = drain[:drain.index("</p>")]
    # 26 deleting (3,000 each), 25 queued (500), 25 throttled (12,000), 25 with no rate (800): files left in all.
    assert f"<b>{26 * 3000 + 25 * 500 + 25 * 12000 + 25 * 800:,}</b> files left" in drain
    # The queued ones and those counted once have no rate yet: the fleet's end is not known, and says why.
    assert "expected end: <b>unknown (no rate yet)</b> (50 RSEs without a rate yet)" in drain
    assert "queued: waiting for a slot: 25" in drain and "waiting for the next slice: 25" in drain
    working = row_of(dom, name(0))
    assert "deleting now" in working and "3,000 left · 11 files/s" in working
    assert re.search(r"ends \d\d:\d\d UTC \(in [\d.]+ (s|min)\)", working)
    assert "queued: waiting for a slot" in row_of(dom, name(1))
    sliced = row_of(dom, name(2))
    assert "waiting for the next slice" in sliced and "next: slice 3 of 4 (6,000 files) at " in sliced
    assert "unknown (no rate yet)" in row_of(dom, name(5))
    assert "done" in row_of(dom, name(3))


def test_failures_show_at_a_glance(fleet: str, chromium: str, tmp_path: Path) -> None:
    dom = render(chromium, fleet + "/?per=200", tmp_path)
    bad, clean = row_of(dom, BAD), row_of(dom, name(3))
    assert "18% deleted · 82% failed" in bad and 'class="part-failed" style="width:82.35%' in bad
    assert "100% deleted" in clean and "part-failed" not in clean  # not the same full bar
    chart = dom[dom.index('class="chart chart-failures"'):]
    chart = chart[:chart.index("</svg>")]
    # Failed files on their own scale: the numbers written on the bars, ticks between 0 and the top.
    numbers = re.findall(r'class="bar-number"[^>]*>([\d,]+)<', chart)
    assert sorted(numbers) == sorted(["1,400", "37", "3"])
    assert re.findall(r'class="tick"[^>]*>([\d,]+)<', chart) == ["0", "500", "1,000"]
    assert re.search(r'class="axis-top"[^>]*>1,400<', chart) and "failed files / day" in chart
    heights = {n: float(h) for h, n in
               re.findall(r'class="bar-failed"[^>]*height="([\d.]+)".*?>([\d,]+)</text>', chart)}
    assert heights["1,400"] > 80 and heights["3"] >= 1  # no longer 0.1-0.6 px beside the deletions
    history_chart = dom[dom.index('class="chart chart-history"'):]
    assert 'class="bar-failed"' not in history_chart[:history_chart.index("</svg>")]
    assert len(re.findall(r'class="day-tick"', history_chart[:history_chart.index("</svg>")])) >= 5


def test_the_rse_page_is_grouped_and_labelled(fleet: str, chromium: str, tmp_path: Path) -> None:
    dom = render(chromium, f"{fleet}/rse?name={urllib.parse.quote(name(2))}", tmp_path)
    now = dom[dom.index('id="facts-now"'):]
    now = now[:now.index("</table>")]
    assert "waiting for the next slice" in now and "slice 2 of 4 done: the next cycle releases the next" in now
    assert "expected end" in now and "next slice" in now and "slice 3 of 4 (6,000 files) at" in now
    for group in ("Files of this dump", "Left out by the plan", "Directories", "Throttle", "Jobs by state"):
        assert f"<h2>{group}</h2>" in dom, group
    for raw in ("dirs_refused", "skipped_protected", "protected_count", "dirs_removable", "unreleased_jobs"):
        assert f">{raw}<" not in dom, raw  # no raw field name as a label
    assert "protected paths (WMStats list)" in dom and "removable per the plan" in dom
    assert "42 removed = 40 by this dump's jobs (of the 40 the plan gave as removable" in dom
    assert "+ 2 by directory jobs" in dom
    bad = render(chromium, f"{fleet}/rse?name={BAD}", tmp_path)
    assert "superseded by a newer dump (never submitted)" in bad
    raw = json.loads(urllib.request.urlopen(f"{fleet}/data/info?rse={BAD}&detail=true", timeout=30).read())
    assert "dirs_removed_by_dir_jobs" in json.dumps(raw)  # the raw names stay in JSON


def test_status_and_metrics_carry_the_same_drain(fleet: str) -> None:
    status = json.loads(urllib.request.urlopen(f"{fleet}/data/status", timeout=30).read())["result"][0]
    for key in ("wmcore_version", "total_num_rses", "total_num_files", "num_files_deleted"):
        assert key in status  # WMCore's fields as they were
    drain = status["drain"]
    assert drain["total"]["backlog_files"] == 26 * 3000 + 25 * 500 + 25 * 12000 + 25 * 800
    assert drain["total"]["by_waiting"]["waiting_for_slot"] == 25 and drain["total"]["unknown_end"] == 50
    sliced = drain["rses"][name(2)]
    assert (sliced["waiting"], sliced["slice"], sliced["slices"], sliced["next_slice_files"]) == \
        ("waiting_for_slice", 2, 4, 6000)
    text = urllib.request.urlopen(f"{fleet}/metrics", timeout=30).read().decode()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in text_string_to_metric_families(text) for s in f.samples}
    assert got[("msunmerged_backlog_files", (("rse", name(2)),))] == 12000
    assert got[("msunmerged_unreleased_files", (("rse", name(2)),))] == 12000
    assert got[("msunmerged_slices_released", (("rse", name(2)),))] == 2
    assert got[("msunmerged_slices", (("rse", name(2)),))] == 4
    assert got[("msunmerged_next_slice_timestamp_seconds", (("rse", name(2)),))] == sliced["next_slice_at"]
    assert round(got[("msunmerged_drain_rate_files_per_second", (("rse", name(0)),))], 1) == 11.1
    assert ("msunmerged_drain_expected_end_timestamp_seconds", (("rse", name(5)),)) not in got  # not known
    waiting = {dict(k[1])["waiting"]: v for k, v in got.items()
               if k[0] == "msunmerged_rse_waiting" and dict(k[1])["rse"] == name(1)}
    assert waiting["waiting_for_slot"] == 1 and sum(waiting.values()) == 1


def test_screenshots_desktop_and_phone(fleet: str, chromium: str, tmp_path: Path) -> None:
    keep = Path(__file__).resolve().parents[3] / "test" / ".servers" / "screenshots"
    keep.mkdir(parents=True, exist_ok=True)
    for page, url in (("index", fleet + "/"), ("failing", fleet + "/?failing=1&sort=failed&order=desc"),
                      ("rse", f"{fleet}/rse?name={BAD}"),
                      ("slice", f"{fleet}/rse?name={urllib.parse.quote(name(2))}")):
        screenshot(chromium, url, tmp_path, "1400,2400", keep / f"drain-{page}-desktop.png")
        screenshot(chromium, url, tmp_path, "390,2400", keep / f"drain-{page}-phone.png")
