"""What the operator sees, rendered by headless Chromium: the dry-run banner, the failing-cycles alert with
reasons linked to the operations guide, and the server-side SVG charts; plus the same facts in data/status
and the metrics. Two extra mounts of the app on the session's server: one in dry run, one in real mode."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import cherrypy
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pymongo import MongoClient

from MSUnmerged.config import Config
from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.history import day_of
from MSUnmerged.rest import app as rest
from MSUnmerged.rest import page
from rest_kit import seed_rse
from test_rest_page import render

pytestmark = pytest.mark.integration

DRY_RSE = "T2_OP_DryRun"
REAL_RSE = "T1_OP_Real"
DOCS = "https://docs.example/msunmerged/operations.md"
DAY = 86400
KEEP = ["/store/unmerged/R/K"]


def fetch(url: str) -> tuple[int, str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers


class Mounts:
    def __init__(self, host: str) -> None:
        self.dry = f"{host}/ms-unmerged-op"
        self.real = f"{host}/ms-unmerged-real"


@pytest.fixture(scope="module")
def mounts(rest_app: Any, mongo_client: MongoClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mounts]:
    mongo_client.drop_database("msunmerged_rest_operator")
    db = mongo_client["msunmerged_rest_operator"]
    work = tmp_path_factory.mktemp("op-plans")
    gen = time.time() - 3600
    kept = [f"/store/unmerged/R/K/RAW/v1/f{i}.root" for i in range(5)]
    seed_rse(db, DRY_RSE, work, [f"/store/unmerged/R/P/RAW/v1/f{i}.root" for i in range(40)] + kept, KEEP, gen,
             done_jobs=2, outcome=lambda i, lfn: {"state": "would_delete"}, files_per_job=10, state="dry_run_done",
             reason="dry_run")
    seed_rse(db, REAL_RSE, work, [f"/store/unmerged/R/Q/RAW/v1/f{i}.root" for i in range(30)] + kept, KEEP, gen,
             done_jobs=3, outcome=lambda i, lfn: ({"state": "failed", "error_class": "permission_denied"} if i % 5 == 0
                                                  else {"state": "deleted", "size": 2 ** 20}),
             files_per_job=10, state="done_with_errors", reason="files_failed")
    ledger = Ledger(db)
    # Earlier days of history, written as the ledger writes a collected job's summary.
    for back in (3, 2):
        day = day_of(time.time() - back * DAY)
        ledger.history.record_job(REAL_RSE, f"{REAL_RSE}:old:{back}", day,
                                  {"states": {"deleted": 100 * back}, "bytes_freed": back * 2 ** 30,
                                   "failed_by_class": {"timeout": back}})
    for slot in (1, 2):  # two cycles that failed before any RSE (Rucio down), none ever good
        ledger.cycles.end_cycle(ledger.cycles.start_cycle("op-test", slot, []), dry_run=True, failures=[
            {"source": "rucio", "reason": "rucio_bad_content", "detail": "<html>login</html>", "rse": ""}])
    db.meta.update_one({"_id": "cycles"}, {"$inc": {"first_started": -18000}})  # failing for five hours
    dry, real = Config(), Config()
    dry.rest.base, dry.rest.operations_url = "/ms-unmerged-op", DOCS
    dry.service.interval_s, dry.service.alert_after_cycles = 600, 2
    real.rest.base, real.service.dry_run = "/ms-unmerged-real", False
    for config in (dry, real):
        rest.mount(config, Ledger(db).view())
    try:
        yield Mounts(rest_app.url.rsplit(rest_app.config.rest.base, 1)[0])
    finally:
        for config in (dry, real):
            del cherrypy.tree.apps[config.rest.base]


def test_dry_run_banner_on_every_page_and_only_in_dry_run(mounts: Mounts, chromium: str, tmp_path: Path) -> None:
    rse_url = f"{mounts.dry}/rse?name={urllib.parse.quote(DRY_RSE)}"
    for url in (f"{mounts.dry}/", rse_url, f"{mounts.dry}/rse?name=T2_NO_Such"):
        dom = render(chromium, url, tmp_path)
        assert 'id="dry-run"' in dom and "DRY RUN" in dom, url
    dom = render(chromium, rse_url, tmp_path)
    facts = dom[dom.index(">progress<"):]
    assert "50% would delete · 50% pending" in facts[:900]  # not 100 % deleted
    for url in (f"{mounts.real}/", f"{mounts.real}/rse?name={urllib.parse.quote(REAL_RSE)}"):
        assert 'id="dry-run"' not in render(chromium, url, tmp_path), url
    status, _, headers = fetch(f"{mounts.dry}/")
    assert status == 200 and headers["Content-Security-Policy"] == page.CSP and "script" not in page.CSP


def test_alert_and_failures_link_their_reason(mounts: Mounts, chromium: str, tmp_path: Path) -> None:
    dom = render(chromium, f"{mounts.dry}/", tmp_path, screenshot=True)
    assert (tmp_path / "page.png").stat().st_size > 5000
    alert = dom[dom.index('id="cycle-alert"'):]
    assert "no polling cycle succeeded since the first cycle 300 min ago" in alert[:400]
    assert "rucio_bad_content" in alert[:400]
    failures = dom[dom.index('id="cycle-failures"'):]
    assert f'href="{DOCS}#source-bad_content"' in failures and "whole cycle" in failures
    assert "&lt;html&gt;login&lt;/html&gt;" in failures  # the detail, as text
    assert f'href="{DOCS}#dry_run"' in dom and f'href="{DOCS}#files_failed"' in dom  # RSE reasons too
    assert 'id="cycle-alert"' in render(chromium, f"{mounts.real}/", tmp_path)  # real mode: same ledger


def test_svg_charts_drawn_on_the_server(mounts: Mounts, chromium: str, tmp_path: Path) -> None:
    dom = render(chromium, f"{mounts.dry}/", tmp_path)
    for kind in ("states", "history", "timeline"):
        assert f'class="chart chart-{kind}"' in dom, kind
    assert dom.count('class="cycle-failed"') == 2 and 'class="cycle-ok"' not in dom
    assert dom.count('class="bar-deleted"') == 3  # three days with deletions
    assert 'class="seg-would_delete"' in dom and 'class="seg-deleted"' in dom and 'class="line-bytes"' in dom
    rse = render(chromium, f"{mounts.dry}/rse?name={urllib.parse.quote(REAL_RSE)}", tmp_path, screenshot=True)
    assert rse.count('class="chart chart-history"') == 1 and "3.2 GB" in rse  # the largest day: 3 GiB freed
    assert "<script" not in rse.lower()


def test_status_and_metrics_carry_dry_run_and_failures(mounts: Mounts) -> None:
    status, text, _ = fetch(f"{mounts.dry}/data/status")
    result = json.loads(text)["result"][0]
    assert status == 200 and result["dry_run"] is True
    health = result["health"]
    assert health["sources"]["rucio"] == 0 and health["last_good_cycle_at"] is None and health["alert"]
    assert health["last_cycle"]["failures"][0]["reason"] == "rucio_bad_content"
    got = {}
    for mount in (mounts.dry, mounts.real):
        text = fetch(f"{mount}/metrics")[1]
        got[mount] = {(s.name, tuple(sorted(s.labels.items()))): s.value
                      for f in text_string_to_metric_families(text) for s in f.samples}
    dry, real = got[mounts.dry], got[mounts.real]
    assert dry[("msunmerged_dry_run", ())] == 1 and real[("msunmerged_dry_run", ())] == 0
    assert dry[("msunmerged_source_up", (("source", "rucio"),))] == 0
    assert dry[("msunmerged_source_up", (("source", "conmon"),))] == 1
    assert dry[("msunmerged_cycle_failures_total", (("reason", "rucio_bad_content"), ("source", "rucio")))] == 2
    assert dry[("msunmerged_files_would_delete", (("rse", DRY_RSE),))] == 20
    assert dry[("msunmerged_cycle_never_good", ())] == 1 and dry[("msunmerged_cycle_alert", ())] == 1
    assert dry[("msunmerged_cycle_last_good_age_seconds", ())] >= 18000  # since the first cycle: never had one
    states = {dict(k[1])["state"]: v for k, v in dry.items()
              if k[0] == "msunmerged_rse_state" and dict(k[1])["rse"] == DRY_RSE}
    assert states["dry_run_done"] == 1 and states["clean"] == 0 and sum(states.values()) == 1
