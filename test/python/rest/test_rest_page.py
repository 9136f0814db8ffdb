"""The operator page rendered by headless Chromium: the RSE table shows the ledger, hostile text stays text."""
from __future__ import annotations

import html
import re
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from rest_kit import seed_rse

pytestmark = pytest.mark.integration

EVIL_RSE = 'T2_XX_<img src=x onerror="document.title=1">'
EVIL_ERROR = "<script>document.title='pwned'</script><b>bold</b>"
EVIL_CLASS = "<b>class</b>"
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


def good_outcome(i: int, lfn: str) -> dict[str, Any]:
    kind = i % 10
    if kind in (6, 7):
        return {"state": "failed", "error_class": "permission_denied", "error": "denied"}
    return {"state": "failed", "error_class": "timeout"} if kind == 8 else {"state": "deleted"}


@pytest.fixture(scope="module")
def page_app(rest_app: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Both RSEs written through the ledger's own methods; the hostile one carries markup everywhere it can."""
    work = tmp_path_factory.mktemp("page-plans")
    gen = time.time() - 3600
    seed_rse(rest_app.db, GOOD_RSE, work, [f"/store/unmerged/Run3/P/RAW/v1/f{i:03d}.root" for i in range(50)]
             + [f"/store/unmerged/Run3/K/RAW/v1/f{i}.root" for i in range(5)], ["/store/unmerged/Run3/K"], gen, done_jobs=4,
             outcome=good_outcome, files_per_job=10, state="clean")
    seed_rse(rest_app.db, EVIL_RSE, work, [f"/store/unmerged/x/y/z/f{i}.root" for i in range(4)]
             + ["/store/unmerged/k/f.root"], ["/store/unmerged/k"], gen, done_jobs=1,
             outcome=lambda i, lfn: {"state": "failed", "error_class": EVIL_CLASS, "error": EVIL_ERROR},
             state="failed", reason=EVIL_ERROR,
             dirs=[{"dir": "/store/unmerged/x/y/z", "state": "refused", "error_class": EVIL_CLASS},
                   {"dir": "/store/unmerged/x/y", "state": "not_empty"}])
    return rest_app


def test_index_shows_the_rse_table(page_app: Any, chromium: str, tmp_path: Path) -> None:
    dom = render(chromium, page_app.url + "/", tmp_path, screenshot=True)
    assert '<table id="rses">' in dom and ">RSE ▲</a></th>" in dom  # sorted by name
    row = dom[dom.index(f">{GOOD_RSE}</a>"):]
    row = row[:row.index("</tr>")]
    assert "clean" in row and ">50<" in row and ">28<" in row and ">12<" in row  # to delete, deleted, failed
    assert "permission_denied: 8" in row and "timeout: 4" in row
    # The bar is split: 28 deleted, 12 failed, 10 pending of 50, each part in its colour and in words.
    assert "56% deleted · 24% failed · 20% pending" in row
    assert re.search(r'class="part-deleted" style="width:56.00%', row) and 'class="part-failed" style="width:24.00%' in row
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
    assert "<img" not in dom and "<script" not in dom.lower() and "<b>" not in dom
    assert "/store/unmerged/x/y/z/f0.root" in dom and "&lt;b&gt;class&lt;/b&gt;" in dom
    directories = dom[dom.index("<h2>Directory outcomes</h2>"):dom.index("<h2>Failed files")]
    for outcome in ("not empty", "refused", "refused: &lt;b&gt;class&lt;/b&gt;"):  # in words; raw names in JSON
        assert f"<td>{outcome}</td>" in directories
    assert f"<title>MSUnmerged {html.escape(EVIL_RSE, quote=False)}</title>" in dom
