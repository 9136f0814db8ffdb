"""The operator's HTML pages: every RSE at a glance, and one page per RSE. No scripts, no outside assets.

Every value from the ledger goes through `esc` (text) or `url_arg` (links); the Content-Security-Policy
set by the app forbids scripts, so even a missed escape could not run code.
"""
from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from MSUnmerged import diskspace, sites
from MSUnmerged.config import Config
from MSUnmerged.ledger.history import totals_by_day as history_totals
from MSUnmerged.ledger.states import FileState, JobState
from MSUnmerged.ledger.view import LedgerView
from MSUnmerged.drainstatus import drain, total
from MSUnmerged.present import (WAITING_WORDS, cycle_share, expected_end, job_slice, job_work, next_slice, rate, shares,
                                shares_label, size, when)
from MSUnmerged.rest import charts
from MSUnmerged.rest.charts import esc
from MSUnmerged.sources.errors import KINDS as SOURCE_KINDS

REFRESH_S = 60
HISTORY_DAYS = 30
TIMELINE_CYCLES = 50
# Forms may only submit to this page itself (the RSE table's filter: a plain GET, no script).
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; form-action 'self'"
PAGE_SIZES = (25, 50, 100, 200)
SORTS = {  # sort key -> the RSE's value it sorts on
    "name": lambda r: r["name"], "state": lambda r: str(r.get("state")),
    "to_delete": lambda r: _count(r, "to_delete"), "deleted": lambda r: _count(r, "deleted"),
    "failed": lambda r: _count(r, "failed"), "updated": lambda r: r.get("updated") or 0,
}
TIERS = ("T0", "T1", "T2", "T3", "other")

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222}
.scroll{overflow-x:auto;max-width:100%}svg.chart{max-width:100%;height:auto}
.totals{display:flex;flex-wrap:wrap;gap:.5em 1.5em;margin:.5em 0}.totals div{min-width:7em}
.totals b{display:block;font-size:1.3em}form.filter{margin:.5em 0}form.filter label{margin-right:.8em}
.pager a,.pager span{margin-right:.8em}th a{color:inherit}
@media (max-width:700px){body{margin:.5em}td,th{padding:.2em .3em}table{font-size:13px}.wide{display:none}}
td.now{min-width:14em}@media (max-width:700px){td.now{min-width:10.5em}}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums}
.st-clean{color:#060}.st-failed,.st-error{color:#b00;font-weight:bold}.st-skipped{color:#a60}
.muted{color:#777}.bar{width:8em;height:.8em;background:#eee;display:inline-flex;vertical-align:middle}
.bar span{display:block;height:100%}.nowrap{white-space:nowrap}
.w-waiting_for_slot,.w-held,.w-waiting_for_top_up{color:#a60}.w-working{color:#060}
table.facts th{width:16em;font-weight:normal;background:#f7f7f7}
code{word-break:break-all}td.t{white-space:nowrap}
.banner{padding:.5em 1em;margin:.5em 0;border-radius:4px;font-weight:bold}
.dry-run{background:#fff4c2;border:1px solid #d9b200}.alert{background:#fde2e2;border:1px solid #b00;color:#800}
svg.chart{display:block;margin:.5em 0}
"""


@dataclass
class Context:
    """What every page needs besides the ledger."""

    base: str = ""
    dry_run: bool = True
    stale_after_s: float = 3 * 3600.0
    operations_url: str = ""  # docs/operations.md as published; empty: reasons are not links
    interval_s: float = 3600.0  # service.interval_s: when the next cycle starts (drainstatus)
    max_dir_tries: int = 4  # 1 + jobs.retries: a directory retried this often is given up
    folders: dict[str, Path] = field(default_factory=dict)  # the service's own folders: their free space is shown

    @classmethod
    def from_config(cls, config: Config) -> "Context":
        return cls(config.rest.base.rstrip("/"), config.service.dry_run, config.service.stale_after_s,
                   config.rest.operations_url, config.service.interval_s, 1 + config.jobs.retries,
                   diskspace.folders(config))


def reason_anchor(reason: str) -> str:
    """The id of the reason's entry in docs/operations.md: `<source>_<kind>` share one entry per kind."""
    if not reason.startswith("backend_"):
        for kind in SOURCE_KINDS:
            if reason.endswith("_" + kind):
                return f"source-{kind}"
    return reason


def reason_link(reason: Any, ctx: Context) -> str:
    """A reason as text linking to its entry in the operations guide."""
    if not reason:
        return '<span class="muted">-</span>'
    anchor = reason_anchor(str(reason))
    if not ctx.operations_url:
        return f'<span class="reason" title="docs/operations.md#{esc(anchor)}">{esc(reason)}</span>'
    return f'<a class="reason" href="{esc(ctx.operations_url)}#{url_arg(anchor)}">{esc(reason)}</a>'


def url_arg(value: Any) -> str:
    return esc(urllib.parse.quote(str(value), safe=""))


def number(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else esc(n if n is not None else 0)


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
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def td(html_text: str, numeric: bool = False, cls: str = "") -> str:
    classes = " ".join(c for c in ("n" if numeric else "", cls) if c)
    return f'<td class="{classes}">{html_text}</td>' if classes else f"<td>{html_text}</td>"


DRY_RUN_BANNER = ('<div class="banner dry-run" id="dry-run">DRY RUN: cleanup jobs delete nothing; they report what '
                  "they would delete. Set <code>service.dry_run = false</code> to delete.</div>")


def document(title: str, body: str, ctx: Context) -> str:
    """A whole page; the dry-run banner on top when the service runs in dry run."""
    banner = DRY_RUN_BANNER if ctx.dry_run else ""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="refresh" content="{REFRESH_S}">'
            f'<meta name="viewport" content="width=device-width">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{banner}{body}"
            f'<p class="muted">Generated {esc(when(time.time()))}; refreshes every {REFRESH_S} s.</p>'
            "</body></html>")


def state_cell(state: Any) -> str:
    return td(esc(state), cls=f"st-{esc(str(state).split('_')[0])}")


def bar(counters: dict[str, Any]) -> str:
    """The planned files as one bar split by outcome (present.shares), each part in its chart colour, and in words."""
    parts = shares(counters)
    whole = sum(parts.values())
    segs = "".join(f'<span class="part-{k}" style="width:{n * 100 / whole:.2f}%;background:{charts.COLOURS[k]}" '
                   f'title="{n:,} {esc(k.replace("_", " "))}"></span>' for k, n in parts.items() if n) if whole else ""
    return f'<span class="bar">{segs}</span> {esc(shares_label(counters))}'



def health_section(view: LedgerView, ctx: Context) -> str:
    """The alert when no cycle succeeded for too long, and the last cycle with its failures."""
    h = view.health(ctx.stale_after_s)
    out = ""
    if h["alert"]:
        out += f'<div class="banner alert" id="cycle-alert">ALERT: {esc(h["alert"])}.</div>'
    out += disk_line(ctx)
    last = h["last_cycle"]
    if last is None:
        return out + "<p>No polling cycle has finished yet.</p>"
    good = "never" if h["last_good_cycle_at"] is None else when(h["last_good_cycle_at"])
    out += (f"<p>Last cycle: started {esc(when(last.get('started')))}, finished {esc(when(last.get('finished')))}"
            f"{'' if last.get('failures') else ', no failure'}. Last cycle with no failure: {esc(good)}.</p>")
    failures = last.get("failures") or []
    if failures:
        rows = [[td(esc(f.get("source"))), td(reason_link(f.get("reason"), ctx)),
                 td(esc(f.get("rse")) or '<span class="muted">whole cycle</span>'), td(esc(f.get("detail")))]
                for f in failures]
        out += ('<h2 id="cycle-failures">Failures of the last cycle</h2>'
                + table(["source", "reason", "RSE", "detail"], rows))
    return out


def disk_line(ctx: Context) -> str:
    """Free space of the service's folders; a banner when one is nearly full (a full one stops the work:
    state_disk_full)."""
    spaces = diskspace.measure(ctx.folders)
    low = [s for s in spaces if s.low]
    text = ", ".join(f"{esc(s.folder)} {esc(size(s.free))} of {esc(size(s.size))}" for s in spaces)
    if low:
        return (f'<div class="banner alert" id="disk-low">DISK NEARLY FULL: {text} free '
                f'({reason_link(diskspace.STATE_DISK_FULL, ctx)} when full).</div>')
    return f'<p id="disk">Free space: {text}.</p>' if spaces else ""


def _count(rse: dict[str, Any], key: str) -> int:
    value = (rse.get("counters") or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def failing(rse: dict[str, Any]) -> bool:
    """An RSE that needs a look: failed files, or a failed or guarded state."""
    return _count(rse, "failed") > 0 or rse.get("state") in ("failed", "guarded")


@dataclass
class Selection:
    """The RSE table's filter, order and page, from the index page's query (unknown values: the defaults)."""

    state: str = ""
    failing: bool = False
    tier: str = ""
    sort: str = "name"
    desc: bool = False
    page: int = 1
    per: int = 50

    @classmethod
    def from_query(cls, params: dict[str, Any]) -> "Selection":
        def text(name: str) -> str:
            value = params.get(name)
            return value if isinstance(value, str) else ""

        def number(name: str, default: int) -> int:
            return int(text(name)) if text(name).isdigit() else default

        sort = text("sort") if text("sort") in SORTS else "name"
        per = number("per", 50)
        return cls(state=text("state"), failing=text("failing") in ("1", "on", "true"),
                   tier=text("tier") if text("tier") in TIERS else "", sort=sort, desc=text("order") == "desc",
                   page=max(1, number("page", 1)), per=per if per in PAGE_SIZES else 50)

    def apply(self, rses: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The RSEs that pass the filter, in order (all pages)."""
        kept = [r for r in rses if (not self.state or r.get("state") == self.state)
                and (not self.failing or failing(r)) and (not self.tier or sites.tier_of(r["name"]) == self.tier)]
        return sorted(kept, key=lambda r: (SORTS[self.sort](r), r["name"]), reverse=self.desc)

    def query(self, **change: Any) -> str:
        """This selection's query string with some values changed."""
        values = {"state": self.state, "failing": "1" if self.failing else "", "tier": self.tier, "sort": self.sort,
                  "order": "desc" if self.desc else "", "page": str(self.page), "per": str(self.per)}
        values.update({k: str(v) for k, v in change.items()})
        return urllib.parse.urlencode({k: v for k, v in values.items() if v and (k, v) not in (
            ("sort", "name"), ("page", "1"), ("per", "50"))})


def drain_cell(d: dict[str, Any], now: float) -> str:
    """What an RSE's backlog does now and when it ends (drainstatus.drain), in words."""
    lines = [f'<span class="w-{esc(d["waiting"])}" title="{esc(d["why"])}">{esc(WAITING_WORDS[d["waiting"]])}</span>']
    if d["backlog_files"]:
        lines.append(f'{d["backlog_files"]:,} left · {esc(rate(d))}')
        lines.append(f"ends {esc(expected_end(d, now, short=True))}")
    if next_slice(d, now):
        lines.append(f'<span class="muted">next: {esc(next_slice(d, now))}</span>')
    return "<br>".join(lines)


def drain_section(drains: list[dict[str, Any]], now: float) -> str:
    """The fleet's drain: files left, files per second, the expected end, RSEs by what they wait for."""
    t = total(drains)
    waits = ", ".join(f"{esc(WAITING_WORDS[k])}: {v:,}" for k, v in t["by_waiting"].items() if v) or "none"
    unknown = f" ({t['unknown_end']:,} RSEs without a rate yet)" if t["unknown_end"] else ""
    return (f'<p id="drain">Backlog: <b>{t["backlog_files"]:,}</b> files left ({t["unreleased_files"]:,} in slices '
            f'not released yet) at <b>{esc(rate(t))}</b>; expected end: <b>{esc(expected_end(t, now))}</b>'
            f'{esc(unknown)}. RSEs: {waits}.</p>')


def totals_section(rses: list[dict[str, Any]]) -> str:
    """The fleet at a glance: RSEs by state, files to delete, done, failed, bytes freed."""
    by_state: dict[str, int] = {}
    for r in rses:
        by_state[str(r.get("state"))] = by_state.get(str(r.get("state")), 0) + 1
    sums = {k: sum(_count(r, k) for r in rses) for k in ("to_delete", "deleted", "would_delete", "failed", "pending")}
    freed = sum(_count(r, "bytes_freed") for r in rses)
    cells = [("RSEs", number(len(rses))), ("failing", number(sum(map(failing, rses)))),
             ("files to delete", number(sums["to_delete"])), ("deleted", number(sums["deleted"])),
             ("would delete (dry run)", number(sums["would_delete"])), ("pending", number(sums["pending"])),
             ("failed", number(sums["failed"])), ("freed", esc(size(freed)) if freed else "-")]
    states = ", ".join(f"{esc(k)}: {v:,}" for k, v in sorted(by_state.items())) or "none"
    return ('<div class="totals" id="totals">' + "".join(f"<div><b>{v}</b>{esc(k)}</div>" for k, v in cells)
            + f'</div><p class="muted">By state: {states}.</p>')


def filter_form(sel: Selection, states: Iterable[str], base: str) -> str:
    """A plain GET form (no script): state, failing only, tier, rows per page."""
    def options(name: str, values: Iterable[str], current: str, label: str) -> str:
        opts = "".join(f'<option value="{esc(v)}"{" selected" if v == current else ""}>{esc(v or "any")}</option>'
                       for v in ("", *values))
        return f'<label>{esc(label)} <select name="{name}">{opts}</select></label>'
    return (f'<form class="filter" method="get" action="{esc(base)}/">'
            + options("state", sorted(states), sel.state, "state") + options("tier", TIERS, sel.tier, "tier")
            + f'<label><input type="checkbox" name="failing" value="1"{" checked" if sel.failing else ""}> failing only'
              "</label>"
            + options("per", [str(n) for n in PAGE_SIZES], str(sel.per), "per page")
            + f'<input type="hidden" name="sort" value="{esc(sel.sort)}">'
            + f'<input type="hidden" name="order" value="{"desc" if sel.desc else ""}">'
            + '<button type="submit">show</button></form>')


def sort_header(label: str, key: str, sel: Selection, base: str) -> str:
    """A column header linking to the table sorted by it (again: the other direction)."""
    desc = not sel.desc if sel.sort == key else key not in ("name", "state")
    mark = (" ▼" if sel.desc else " ▲") if sel.sort == key else ""
    query = sel.query(sort=key, order="desc" if desc else "", page=1)
    return f'<a href="{esc(base)}/?{esc(query)}">{esc(label)}{mark}</a>'


def index_page(view: LedgerView, ctx: Context, params: Optional[dict[str, Any]] = None) -> str:
    base = ctx.base
    rses = view.rses()
    now = time.time()
    drains = {r["name"]: drain(r, now, ctx.interval_s) for r in rses}
    sel = Selection.from_query(params or {})
    chosen = sel.apply(rses)
    pages = max(1, -(-len(chosen) // sel.per))
    sel.page = min(sel.page, pages)
    shown = chosen[(sel.page - 1) * sel.per:sel.page * sel.per]
    rows = []
    for r in shown:
        c = r.get("counters") or {}
        rows.append([
            td(f'<a href="{esc(base)}/rse?name={url_arg(r["name"])}">{esc(r["name"])}</a>'),
            state_cell(r.get("state")),
            td(reason_link(r.get("reason"), ctx), cls="wide"),
            td(esc(when(r.get("generation"))), cls="t wide"),
            td(esc(when(r.get("updated"))), cls="t wide"),
            td(number(c.get("to_delete", 0)), numeric=True, cls="wide"),
            td(number(c.get("deleted", 0)), numeric=True, cls="wide"),
            td(number(c.get("failed", 0)), numeric=True),
            td(top_errors(c), cls="wide"),
            td(bar(c) + (f'<br><span class="muted">{esc(cycle_share(c))}</span>' if cycle_share(c) else "")
               + "<br>" + drain_cell(drains[r["name"]], now), cls="now"),
        ])
    sortable = {"RSE": "name", "state": "state", "last update": "updated", "to delete": "to_delete",
                "deleted": "deleted", "failed": "failed"}
    headers = ["RSE", "state", "reason", "last dump", "last update", "to delete", "deleted", "failed",
               "top error classes", "progress, now and expected end"]
    wide = {"reason", "last dump", "last update", "to delete", "deleted", "top error classes"}  # hidden on a phone
    head = "".join(("<th class=\"wide\">" if h in wide else "<th>")
                   + (sort_header(h, sortable[h], sel, base) if h in sortable else esc(h)) + "</th>" for h in headers)
    none = "no RSE in the ledger yet" if not rses else "no RSE matches"
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows) or \
        f'<tr><td colspan="{len(headers)}" class="muted">{none}</td></tr>'
    first = (sel.page - 1) * sel.per + 1 if shown else 0
    pager = (f'<p class="pager" id="pager"><span>RSEs {first:,}-{first + len(shown) - 1 if shown else 0:,} of '
             f"{len(chosen):,}" + (f" (of {len(rses):,} in all)" if len(chosen) != len(rses) else "") + "</span>"
             + (f'<a href="{esc(base)}/?{esc(sel.query(page=sel.page - 1))}">previous</a>' if sel.page > 1 else "")
             + (f'<a href="{esc(base)}/?{esc(sel.query(page=sel.page + 1))}">next</a>' if sel.page < pages else "")
             + f"<span>page {sel.page} of {pages}</span></p>")
    states = {str(r.get("state")) for r in rses}
    body_html = (f"<h1>MSUnmerged: /store/unmerged cleanup</h1>{health_section(view, ctx)}"
                 + totals_section(rses) + drain_section(list(drains.values()), now)
                 + f'<p><a href="{esc(base)}/data/status">status JSON</a> · '
                   f'<a href="{esc(base)}/metrics">metrics</a></p>'
                 + filter_form(sel, states, base) + pager
                 + f'<div class="scroll"><table id="rses"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
                   "</table></div>"
                 + "<h2>Files by state (the RSEs of this page)</h2>" + charts.states_chart(shown)
                 + daily_charts(history_totals(view.history(None, HISTORY_DAYS)), "All RSEs")
                 + "<h2>Polling cycles</h2>" + charts.timeline_chart(view.cycles(TIMELINE_CYCLES)))
    return document("MSUnmerged", body_html, ctx)


def daily_charts(days: list[dict[str, Any]], who: str) -> str:
    """Deletions and freed space per day, then failed files per day on their own scale."""
    return ("<h2>Deletions and freed space per day</h2>" + charts.daily_chart(days, f"{who}, per day", HISTORY_DAYS)
            + '<h2 id="failures">Failed files per day</h2>'
            + charts.failures_chart(days, f"{who}, failed files per day", HISTORY_DAYS))


# An RSE's counters for people: (section, counter, words). Counters not listed show under "Other counters" by their
# raw name; the raw names stay in data/info and data/status.
FACTS = (
    ("Files of this dump", "to_delete", "planned for deletion"), ("Files of this dump", "deleted", "deleted"),
    ("Files of this dump", "missing", "already gone at the site"),
    ("Files of this dump", "would_delete", "would be deleted (dry run)"), ("Files of this dump", "failed", "failed"),
    ("Files of this dump", "unknown", "outcome unknown (retried)"), ("Files of this dump", "pending", "pending"),
    ("Files of this dump", "skipped_protected", "protected since planning (kept)"),
    ("Files of this dump", "bytes_freed", "space freed"),
    ("Left out by the plan", "protected", "files under protected paths"),
    ("Left out by the plan", "excluded", "files outside the path filters"),
    ("Left out by the plan", "protected_count", "protected paths (WMStats list)"),
    ("Directories", "dirs_removable", "removable per the plan"), ("Directories", "dirs_removed", "removed"),
    ("Directories", "dirs_removed_by_dir_jobs", "of which by directory jobs (earlier dumps' directories)"),
    ("Directories", "dirs_refused", "refused by the worker"), ("Directories", "dirs_failed", "failed (storage errors)"),
    ("Throttle", "slice", "slices released"), ("Throttle", "slices", "slices in all"),
    ("Throttle", "cycle_files", "files of the slice released last"),
    ("Throttle", "unreleased_files", "files in slices not released yet"),
    ("Throttle", "unreleased_jobs", "jobs in slices not released yet"),
)
# Job states for people (ledger/states.py JobState).
JOB_WORDS = {"planned": "planned (not submitted yet)", "submitting": "being submitted", "queued": "queued",
             "running": "running", "held": "held", "finished": "finished", "failed": "failed (batch system)",
             "removed": "removed by the service", "vanished": "vanished from the batch system",
             "superseded": "superseded by a newer dump (never submitted)"}
assert set(JOB_WORDS) == {s.value for s in JobState}


def facts_table(rows: Sequence[tuple[str, str]], ident: str = "") -> str:
    """A two-column table of labelled values (already-escaped HTML)."""
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    ident_attr = f' id="{ident}"' if ident else ""
    return f'<div class="scroll"><table class="facts"{ident_attr}><tbody>{body}</tbody></table></div>'


def counter_sections(c: dict[str, Any]) -> str:
    """The RSE's counters grouped and in words (FACTS); dictionaries (per class, per state) have their own tables."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for group, key, words in FACTS:
        if key in c:
            v = c[key]
            shown = f"{number(v)} ({esc(size(v))})" if key == "bytes_freed" and v else number(v)
            groups.setdefault(group, []).append((esc(words), shown))
    if "dirs_removed" in c and "dirs_removable" in c:
        groups["Directories"].append(("how they add up", esc(dir_note(c))))
    known = {key for _, key, _ in FACTS}
    other = [(f"<code>{esc(k)}</code>", number(v)) for k, v in sorted(c.items())
             if k not in known and not isinstance(v, (dict, list))]
    if other:
        groups["Other counters"] = other
    return "".join(f"<h2>{esc(g)}</h2>" + facts_table(rows, "facts-" + g.split()[0].lower())
                   for g, rows in groups.items())


def dir_note(c: dict[str, Any]) -> str:
    """Why removed directories may outnumber the plan's removable ones."""
    removed, removable, retried = (_int(c.get(k))
                                   for k in ("dirs_removed", "dirs_removable", "dirs_removed_by_dir_jobs"))
    return (f"{removed:,} removed = {removed - retried:,} by this dump's jobs (of the {removable:,} the plan gave as "
            f"removable, plus empty ones their sweep found below them) + {retried:,} by directory jobs retrying "
            "directories earlier dumps left")


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def now_facts(r: dict[str, Any], now: float, ctx: Context) -> list[tuple[str, str]]:
    """The RSE's state, what its backlog does now and when it ends (drainstatus.drain), its dump and its errors."""
    c = r.get("counters") or {}
    d = drain(r, now, ctx.interval_s)
    facts = [("state", f"{esc(r.get('state'))} · {reason_link(r.get('reason'), ctx)}"),
             ("now", f'<span class="w-{esc(d["waiting"])}">{esc(WAITING_WORDS[d["waiting"]])}</span>: '
                     f'{esc(d["why"])}'),
             ("detail", esc(r.get("detail")) or "-"), ("progress", bar(c)),
             ("files left", f'{d["backlog_files"]:,}'), ("rate (recent counts)", esc(rate(d))),
             ("expected end", esc(expected_end(d, now)))]
    if next_slice(d, now):
        facts.append(("next slice", esc(next_slice(d, now))))
    if cycle_share(c):
        facts.append(("throttle", esc(cycle_share(c))))
    return facts + [("next cycle", esc(when(d["next_cycle_at"]))),
                    ("dump (generation)", esc(when(r.get("generation")))),
                    ("planned", esc(when((r.get("plan") or {}).get("planned")))),
                    ("last update", esc(when(r.get("updated")))), ("errors by class", top_errors(c, 20))]


def jobs_by_state(c: dict[str, Any]) -> str:
    """The RSE's jobs counted by state, in words."""
    rows = [(esc(JOB_WORDS.get(str(k), str(k))), number(v)) for k, v in sorted((c.get("jobs_by_state") or {}).items())]
    return "<h2>Jobs by state</h2>" + facts_table(rows or [("-", "no jobs")], "facts-jobs")


def jobs_section(jobs: list[dict[str, Any]]) -> str:
    """The RSE's recent jobs."""
    rows = [[td(f"<code>{esc(j.get('id'))}</code>"), state_cell(j.get("state")), td(esc(job_slice(j)), numeric=True),
             td(esc(j.get("backend"))), td(esc(j.get("site"))), td(esc(job_work(j)), numeric=True),
             td(esc(when(j.get("submitted_at"))), cls="t"), td(esc(when(j.get("finished_at"))), cls="t"),
             td(esc(j.get("exit_code")) or '<span class="muted">-</span>', numeric=True),
             td(esc(j.get("reason")))] for j in jobs]
    headers = ["job", "state", "slice", "backend", "site", "work", "submitted", "finished", "exit code", "reason"]
    return "<h2>Recent jobs</h2>" + table(headers, rows, "no jobs")


def dirs_section(c: dict[str, Any], given_up: list[dict[str, Any]], name: str, ctx: Context) -> str:
    """The RSE's directory outcomes, and the directories given up on."""
    dirs = [(esc(k.replace("_", " ")), number(v)) for k, v in sorted((c.get("dirs_by_state") or {}).items())]
    dirs += [(f"refused: {esc(k)}", number(v)) for k, v in sorted((c.get("dirs_refused_by_reason") or {}).items())]
    given_rows = [[td(f"<code>{esc(g.get('dir'))}</code>"), td(esc(str(g.get("state", "")).replace("_", " "))),
                   td(esc(g.get("error")) or '<span class="muted">-</span>'),
                   td(number(g.get("tries", 0)), numeric=True), td(esc(when(g.get("since"))), cls="t")]
                  for g in given_up]
    return ("<h2>Directory outcomes</h2>"
            + table(["outcome", "directories"], [[td(k), td(v, numeric=True)] for k, v in dirs], "no outcome yet")
            + f'<p><a href="{esc(ctx.base)}/data/dirs?rse={url_arg(name)}&amp;state=refused">refused directories as '
              "JSON</a></p>"
            + f'<h2 id="given-up">Directories given up on ({len(given_up):,})</h2>'
            + '<p class="muted">Removable directories not removed after every try (jobs.retries): the service no '
              "longer retries them; the last outcome says why.</p>"
            + table(["directory", "last outcome", "why", "tries", "first planned"], given_rows, "none"))


def failed_section(failed: list[dict[str, Any]], name: str, ctx: Context) -> str:
    """The RSE's first failed files, and a link to all of them."""
    rows = [[td(f"<code>{esc(f.get('lfn'))}</code>"), td(esc(f.get("error_class"))), td(esc(f.get("error"))),
             td(number(f.get("attempts", 0)), numeric=True), td(f"<code>{esc(f.get('job'))}</code>")] for f in failed]
    return (f"<h2>Failed files (first {len(failed)})</h2>"
            + table(["LFN", "error class", "message", "attempts", "job"], rows, "no failed files")
            + f'<p><a href="{esc(ctx.base)}/data/files?rse={url_arg(name)}&amp;state=failed&amp;stream=true">'
              "all failed files as JSON</a></p>")


def rse_page(view: LedgerView, ctx: Context, name: str) -> Optional[str]:
    """The page of one RSE, or None when the ledger does not know it."""
    r = view.rse(name)
    if r is None:
        return None
    c = r.get("counters") or {}
    events = [[td(esc(when(e.get("at"))), cls="t"), state_cell(e.get("state")), td(reason_link(e.get("reason"), ctx)),
               td(esc(e.get("detail")))] for e in reversed(r.get("events") or [])]
    body = (f'<p><a href="{esc(ctx.base)}/">all RSEs</a> · <a href="{esc(ctx.base)}/data/info?rse={url_arg(name)}'
            f'&amp;detail=true">this RSE as JSON (raw field names)</a></p><h1>{esc(name)}</h1>'
            + "<h2>Now</h2>" + facts_table(now_facts(r, time.time(), ctx), "facts-now")
            + counter_sections(c) + jobs_by_state(c)
            + "<h2>Files by state</h2>" + charts.states_chart([r])
            + daily_charts(history_totals(view.history(name, HISTORY_DAYS)), name)
            + jobs_section(view.jobs(name, None, 50))
            + "<h2>Recent skips and failures</h2>"
            + table(["when", "state", "reason", "detail"], events, "none recorded")
            + dirs_section(c, view.given_up_dirs(name, ctx.max_dir_tries), name, ctx)
            + failed_section(list(view.files(name, FileState.FAILED, None, None, None, None, 200)), name, ctx))
    return document(f"MSUnmerged {name}", body, ctx)
