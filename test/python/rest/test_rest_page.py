"""The operator page rendered by headless Chromium: the RSE table shows the ledger, hostile text stays text."""
from __future__ import annotations

import html
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from MSUnmerged.ledger import file_id

pytestmark = pytest.mark.integration

EVIL_RSE = 'T2_XX_<img src=x onerror="document.title=1">'
EVIL_ERROR = "<script>document.title='pwned'</script><b>bold</b>"
GOOD_RSE = "T1_PG_Page"


def render(chromium: str, url: str, tmp: Path, screenshot: bool = False) -> str:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp / 'profile'}"]
    if screenshot:
        subprocess.run([chromium, *flags, f"--screenshot={tmp / 'page.png'}", "--window-size=1400,600", url],
                       capture_output=True, timeout=120, check=True)
    result = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def page_app(rest_app: Any) -> Any:
    db = rest_app.db
    now = time.time()
    db.rses.delete_many({"_id": {"$in": [EVIL_RSE, GOOD_RSE]}})
    db.files.delete_many({"rse": {"$in": [EVIL_RSE, GOOD_RSE]}})
    db.rses.insert_many([
        {"_id": GOOD_RSE, "state": "clean", "reason": "", "generation": now - 3600, "updated": now - 100,
         "counters": {"to_delete": 5000, "pending": 700, "deleted": 4000, "failed": 321,
                      "failed_by_class": {"permission_denied": 300, "timeout": 21}}},
        {"_id": EVIL_RSE, "state": "failed", "reason": EVIL_ERROR, "generation": now - 3600,
         "events": [{"at": now, "state": "failed", "reason": EVIL_ERROR, "detail": EVIL_ERROR}],
         "counters": {"to_delete": 10, "pending": 0, "deleted": 5, "failed": 5, "failed_by_class": {EVIL_ERROR: 5}}},
    ])
    lfn = "/store/unmerged/x/<i>f</i>.root"
    db.files.insert_one({"_id": file_id(EVIL_RSE, now - 3600, lfn), "rse": EVIL_RSE, "gen": now - 3600, "lfn": lfn,
                         "dir": "/store/unmerged/x", "state": "failed", "error_class": "storage_error",
                         "error": EVIL_ERROR, "attempts": 2, "job": "j"})
    return rest_app


def test_index_shows_the_rse_table(page_app: Any, chromium: str, tmp_path: Path) -> None:
    dom = render(chromium, page_app.url + "/", tmp_path, screenshot=True)
    assert "<table>" in dom and ">RSE</th>" in dom
    row = dom[dom.index(f">{GOOD_RSE}</a>"):]
    row = row[:row.index("</tr>")]
    assert "clean" in row and "5,000" in row and "4,000" in row and "321" in row
    assert "permission_denied: 300" in row and "86%" in row
    assert (tmp_path / "page.png").stat().st_size > 1000


def test_hostile_rse_name_and_error_render_as_text(page_app: Any, chromium: str, tmp_path: Path) -> None:
    dom = render(chromium, page_app.url + "/", tmp_path)
    assert "<img" not in dom and "<script" not in dom.lower() and "<b>bold" not in dom
    assert html.escape(EVIL_RSE, quote=False) in dom  # shown, as text
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom
    assert "<title>MSUnmerged</title>" in dom  # nothing ran to change it


def test_rse_page_lists_failed_files_as_text(page_app: Any, chromium: str, tmp_path: Path) -> None:
    url = f"{page_app.url}/rse?name={urllib.parse.quote(EVIL_RSE, safe='')}"
    dom = render(chromium, url, tmp_path)
    assert "<img" not in dom and "<script" not in dom.lower() and "<i>f</i>" not in dom
    assert "/store/unmerged/x/&lt;i&gt;f&lt;/i&gt;.root" in dom and "storage_error" in dom
    assert f"<title>MSUnmerged {html.escape(EVIL_RSE, quote=False)}</title>" in dom
