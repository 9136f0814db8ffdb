"""The operator's HTML pages: every RSE at a glance, and one page per RSE. No scripts, no outside assets.

Every value from the ledger goes through `esc` (text) or `url_arg` (links); the Content-Security-Policy
set by the app forbids scripts, so even a missed escape could not run code.
"""
from __future__ import annotations

import html
import time
import urllib.parse
from typing import Any, Iterable, Optional, Sequence

from MSUnmerged.rest.view import LedgerView

REFRESH_S = 60
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; form-action 'none'"

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums}
.st-clean{color:#060}.st-failed,.st-error{color:#b00;font-weight:bold}.st-skipped{color:#a60}
.muted{color:#777}.bar{width:8em;height:.8em;background:#eee;display:inline-block;vertical-align:middle}
.bar span{display:block;height:100%;background:#48a}
code{word-break:break-all}td.t{white-space:nowrap}
"""


def esc(value: Any) -> str:
    """Any value as HTML text (quotes too, so it is safe in attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def url_arg(value: Any) -> str:
    return esc(urllib.parse.quote(str(value), safe=""))


def when(ts: Any) -> str:
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def number(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else esc(n if n is not None else 0)


def progress(counters: dict[str, Any]) -> tuple[float, str]:
    """Fraction of the planned files with an outcome (anything but still pending)."""
    planned = counters.get("to_delete") or 0
    if not isinstance(planned, int) or planned <= 0:
        return 0.0, "-"
    frac = min(1.0, max(0.0, 1.0 - (counters.get("pending") or 0) / planned))
    return frac, f"{frac:.0%}"


def top_errors(counters: dict[str, Any], n: int = 3) -> str:
    by_class = counters.get("failed_by_class") or {}
    top = sorted(by_class.items(), key=lambda kv: (-(kv[1] or 0), kv[0]))[:n]
    return ", ".join(f"{esc(k)}: {number(v)}" for k, v in top) or '<span class="muted">none</span>'


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], empty: str = "nothing yet") -> str:
    """Cells are already-escaped HTML."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    if not body:
        body = f'<tr><td colspan="{len(headers)}" class="muted">{esc(empty)}</td></tr>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def td(html_text: str, numeric: bool = False, cls: str = "") -> str:
    classes = " ".join(c for c in ("n" if numeric else "", cls) if c)
    return f'<td class="{classes}">{html_text}</td>' if classes else f"<td>{html_text}</td>"


def document(title: str, body: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="refresh" content="{REFRESH_S}">'
            f'<meta name="viewport" content="width=device-width">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{body}"
            f'<p class="muted">Generated {esc(when(time.time()))}; refreshes every {REFRESH_S} s.</p>'
            "</body></html>")


def state_cell(state: Any) -> str:
    return td(esc(state), cls=f"st-{esc(str(state).split('_')[0])}")


def bar(counters: dict[str, Any]) -> str:
    frac, label = progress(counters)
    return f'<span class="bar"><span style="width:{frac * 100:.1f}%"></span></span> {esc(label)}'


def index_page(view: LedgerView, base: str) -> str:
    rses = view.rses()
    cycles = view.cycles(1)
    rows = []
    for r in rses:
        c = r.get("counters") or {}
        rows.append([
            td(f'<a href="{esc(base)}/rse?name={url_arg(r["name"])}">{esc(r["name"])}</a>'),
            state_cell(r.get("state")),
            td(esc(r.get("reason")) or '<span class="muted">-</span>'),
            td(esc(when(r.get("generation"))), cls="t"),
            td(esc(when(r.get("updated"))), cls="t"),
            td(number(c.get("to_delete", 0)), numeric=True),
            td(number(c.get("deleted", 0)), numeric=True),
            td(number(c.get("failed", 0)), numeric=True),
            td(top_errors(c)),
            td(bar(c)),
        ])
    last = cycles[0] if cycles else None
    cycle_text = (f"Last cycle: started {esc(when(last.get('started')))}, "
                  f"finished {esc(when(last.get('finished')))}" if last else "No polling cycle recorded yet.")
    body = (f"<h1>MSUnmerged: /store/unmerged cleanup</h1><p>{cycle_text}. {len(rses)} RSEs. "
            f'<a href="{esc(base)}/data/status">status JSON</a> · <a href="{esc(base)}/metrics">metrics</a></p>'
            + table(["RSE", "state", "reason", "last dump", "last update", "to delete", "deleted", "failed",
                     "top error classes", "progress"], rows, "no RSE in the ledger yet"))
    return document("MSUnmerged", body)


def rse_page(view: LedgerView, base: str, name: str) -> Optional[str]:
    """The page of one RSE, or None when the ledger does not know it."""
    r = view.rse(name)
    if r is None:
        return None
    c = r.get("counters") or {}
    facts = [("state", esc(r.get("state"))), ("reason", esc(r.get("reason")) or "-"),
             ("generation (dump end_time)", esc(when(r.get("generation")))),
             ("planned", esc(when((r.get("plan") or {}).get("planned")))), ("last update", esc(when(r.get("updated")))),
             ("detail", esc(r.get("detail")) or "-"), ("progress", bar(c))]
    facts += [(esc(k), number(v)) for k, v in sorted(c.items()) if not isinstance(v, dict)]
    facts.append(("errors by class", top_errors(c, 20)))
    jobs = view.jobs(name, None, 50)
    job_rows = [[td(f"<code>{esc(j.get('id'))}</code>"), state_cell(j.get("state")), td(esc(j.get("site"))),
                 td(number(j.get("files", 0)), numeric=True), td(esc(when(j.get("submitted_at"))), cls="t"),
                 td(esc(when(j.get("finished_at"))), cls="t"), td(esc(j.get("reason")))] for j in jobs]
    events = [[td(esc(when(e.get("at"))), cls="t"), state_cell(e.get("state")), td(esc(e.get("reason"))),
               td(esc(e.get("detail")))] for e in reversed(r.get("events") or [])]
    dirs = [(esc(k), number(v)) for k, v in sorted((c.get("dirs_by_state") or {}).items())]
    dirs += [(f"refused: {esc(k)}", number(v)) for k, v in sorted((c.get("dirs_refused_by_reason") or {}).items())]
    failed = list(view.files(name, "failed", None, None, None, None, 200))
    file_rows = [[td(f"<code>{esc(f.get('lfn'))}</code>"), td(esc(f.get("error_class"))),
                  td(esc(f.get("error"))), td(number(f.get("attempts", 0)), numeric=True),
                  td(f"<code>{esc(f.get('job'))}</code>")] for f in failed]
    body = (f'<p><a href="{esc(base)}/">all RSEs</a></p><h1>{esc(name)}</h1>'
            + table(["", "value"], [[td(k), td(v)] for k, v in facts])
            + "<h2>Recent jobs</h2>"
            + table(["job", "state", "site", "files", "submitted", "finished", "reason"], job_rows, "no jobs")
            + "<h2>Recent skips and failures</h2>"
            + table(["when", "state", "reason", "detail"], events, "none recorded")
            + "<h2>Directories</h2>"
            + table(["outcome", "directories"], [[td(k), td(v, numeric=True)] for k, v in dirs], "no outcome yet")
            + f'<p><a href="{esc(base)}/data/dirs?rse={url_arg(name)}&amp;state=refused">refused directories as JSON</a>'
              "</p>"
            + f"<h2>Failed files (first {len(failed)})</h2>"
            + table(["LFN", "error class", "message", "attempts", "job"], file_rows, "no failed files")
            + f'<p><a href="{esc(base)}/data/files?rse={url_arg(name)}&amp;state=failed&amp;stream=true">'
              "all failed files as JSON</a></p>")
    return document(f"MSUnmerged {name}", body)
