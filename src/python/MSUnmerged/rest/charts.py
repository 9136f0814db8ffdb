"""Server-side SVG charts for the operator page (inline markup: no scripts, no fetched images, so the page's
Content-Security-Policy stays as it is). Every text goes through `esc`; every `<title>` is a hover tooltip."""
from __future__ import annotations

import html
import math
import time
from typing import Any, Mapping, Optional, Sequence

from MSUnmerged.present import size

WIDTH, HEIGHT, PAD = 640, 170, 36
# Series colours, one place: files by state and the daily bars share them.
COLOURS = {"deleted": "#3a7", "missing": "#9c9", "would_delete": "#89b", "failed": "#c33", "unknown": "#e93",
           "pending": "#ccc", "skipped_protected": "#a7c", "bytes_freed": "#247"}
STATE_SERIES = ("deleted", "missing", "would_delete", "failed", "unknown", "pending", "skipped_protected")
DAILY_SERIES = ("deleted", "would_delete")  # failures: failures_chart, on their own scale


def esc(value: Any) -> str:
    """Any value as HTML text (quotes too, so it is safe in attributes); the page's too."""
    return html.escape("" if value is None else str(value), quote=True)


def _svg(kind: str, label: str, height: int, inner: str) -> str:
    return (f'<svg class="chart chart-{kind}" role="img" aria-label="{esc(label)}" width="{WIDTH}" '
            f'height="{height}" viewBox="0 0 {WIDTH} {height}" xmlns="http://www.w3.org/2000/svg">'
            f"<title>{esc(label)}</title>{inner}</svg>")


def _text(x: float, y: float, text: str, anchor: str = "start", cls: str = "") -> str:
    extra = f' class="{cls}"' if cls else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="11" fill="#555" text-anchor="{anchor}"{extra}>'
            f"{esc(text)}</text>")


def _legend(series: Sequence[str], y: float, x: float = PAD) -> str:
    out = []
    for name in series:
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{COLOURS[name]}"/>'
                   + _text(x + 13, y, name.replace("_", " ")))
        x += 18 + 7 * len(name)
    return "".join(out)


def label_width(text: str) -> float:
    """Room a label of 11 px digits takes (an axis's margin is made this wide, never clipped)."""
    return 6.5 * len(text) + 8


def day_range(first: str, last: str) -> list[str]:
    """Every UTC day from `first` to `last` (YYYY-MM-DD), so that days without data show as gaps."""
    start = time.mktime(time.strptime(first, "%Y-%m-%d"))
    end = time.mktime(time.strptime(last, "%Y-%m-%d"))
    return [time.strftime("%Y-%m-%d", time.localtime(start + i * 86400 + 3600))
            for i in range(int(round((end - start) / 86400)) + 1)]


def ticks(top: float, n: int = 4) -> list[float]:
    """Round values from 0 up to `top` for an axis (1, 2 or 5 times a power of ten apart), about `n` of them."""
    if top <= 0:
        return [0.0]
    raw = top / n
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    step = max(step, 1.0)
    return [i * step for i in range(int(top // step) + 1)]


def _span(days: Sequence[Mapping[str, Any]], n_days: int) -> list[str]:
    """Every day the chart shows: the span ends today and is `n_days` long (0: the data's own span)."""
    today = time.strftime("%Y-%m-%d", time.gmtime())
    first = time.strftime("%Y-%m-%d", time.gmtime(time.time() - (n_days - 1) * 86400)) if n_days else days[0]["day"]
    return day_range(min(first, days[0]["day"]), max(today if n_days else days[-1]["day"], days[-1]["day"]))


def _day_axes(span: Sequence[str], top: float, left: float, right: float, base_y: float, plot_h: float,
              unit: str) -> list[str]:
    """The axes of a per-day chart: y ticks with grid lines (the top one, `top`, labelled exactly, class axis-top),
    a date under every few days (about six), the unit on top."""
    top_y = base_y - plot_h
    parts = [f'<line x1="{left:.1f}" y1="{base_y}" x2="{WIDTH - right:.1f}" y2="{base_y}" stroke="#999"/>',
             f'<line x1="{left:.1f}" y1="{top_y}" x2="{left:.1f}" y2="{base_y}" stroke="#ccc"/>']
    for t in ticks(top):
        y = base_y - plot_h * t / top
        if t and y < top_y + 12:  # the top label says it
            continue
        if t:
            parts.append(f'<line x1="{left:.1f}" y1="{y:.1f}" x2="{WIDTH - right:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(_text(left - 4, y + 4, f"{t:,.0f}", "end", "tick"))
    parts += [_text(left - 4, top_y + 4, f"{top:,.0f}", "end", "axis-top"), _text(4, PAD - 10, unit)]
    step = (WIDTH - left - right) / len(span)
    every = max(1, -(-len(span) // 6))
    for i in range(0, len(span), every):
        parts.append(_text(left + i * step, base_y + 14, span[i][5:], cls="day-tick"))
    return parts


def daily_chart(days: Sequence[Mapping[str, Any]], label: str, n_days: int = 0) -> str:
    """Stacked bars per day (deleted, would delete; files per day on the left axis) and a line of bytes freed per
    day (right axis, only when any were freed); failures have their own chart (failures_chart). Every day of the
    span has its slot: a day without data is a gap, never closed up. `n_days`: the span ends today and is this long
    (else the data's)."""
    if not days:
        return f'<p class="muted">{esc(label)}: no outcomes recorded yet.</p>'
    by_day = {d["day"]: d for d in days}
    span = _span(days, n_days)
    top = max(1, max(sum(d.get(k, 0) for k in DAILY_SERIES) for d in days))
    top_bytes = max(d.get("bytes_freed", 0) for d in days)
    left = max(PAD, label_width(f"{top:,}"))
    right = max(PAD, label_width(size(top_bytes))) if top_bytes else PAD
    plot_h = HEIGHT - 2 * PAD
    step = (WIDTH - left - right) / len(span)
    base_y = PAD + plot_h
    parts = _day_axes(span, top, left, right, base_y, plot_h, "files / day")
    line: list[str] = []
    segments: list[list[str]] = [line]
    for i, day in enumerate(span):
        x = left + i * step
        d = by_day.get(day)
        if d is None:  # no data that day: a gap in the bars and in the line
            if line:
                line = []
                segments.append(line)
            continue
        y = base_y
        for k in DAILY_SERIES:
            h = plot_h * d.get(k, 0) / top
            if h > 0:
                parts.append(f'<rect class="bar-{k}" x="{x + 1:.1f}" y="{y - h:.1f}" width="{max(1.0, step - 2):.1f}" '
                             f'height="{h:.1f}" fill="{COLOURS[k]}"><title>{esc(day)}: {d.get(k, 0):,} '
                             f'{esc(k.replace("_", " "))}</title></rect>')
                y -= h
        if top_bytes:
            line.append(f"{x + step / 2:.1f},{base_y - plot_h * d.get('bytes_freed', 0) / top_bytes:.1f}")
    if top_bytes:
        for points in segments:
            if points:
                parts.append(f'<polyline class="line-bytes" points="{" ".join(points)}" fill="none" '
                             f'stroke="{COLOURS["bytes_freed"]}" stroke-width="2"><title>bytes freed per day, '
                             f'at most {esc(size(top_bytes))}</title></polyline>')
        parts += [_text(WIDTH - right + 4, PAD + 4, size(top_bytes)), _text(WIDTH - right + 4, base_y, "0 B"),
                  _text(WIDTH - 4, PAD - 10, "bytes freed / day", "end")]
    parts.append(_legend([*DAILY_SERIES, *(("bytes_freed",) if top_bytes else ())], 14, left))
    return _svg("history", label, HEIGHT, "".join(parts))


def failures_chart(days: Sequence[Mapping[str, Any]], label: str, n_days: int = 0) -> str:
    """Failed files per day on their own scale (a day of 1,400 failures is not a sliver beside a million
    deletions), each bar with its number written above it (no hovering needed, phones included)."""
    failed = [d for d in days if d.get("failed")]
    if not failed:
        return f'<p class="muted" id="no-failures">{esc(label)}: no failed file in these days.</p>'
    by_day = {d["day"]: d for d in days}
    span = _span(days, n_days)
    top = max(d["failed"] for d in failed)
    left = max(PAD, label_width(f"{top:,}"))
    plot_h = HEIGHT - 2 * PAD - 10  # room above the tallest bar for its number
    base_y = HEIGHT - PAD
    step = (WIDTH - left - PAD) / len(span)
    parts = _day_axes(span, top, left, PAD, base_y, plot_h, "failed files / day")
    for i, day in enumerate(span):
        n = (by_day.get(day) or {}).get("failed", 0)
        if not n:
            continue
        x, h = left + i * step, max(1.0, plot_h * n / top)
        classes = ", ".join(f"{k}: {v:,}" for k, v in sorted(((by_day[day].get("failed_by_class") or {}).items()),
                                                              key=lambda kv: -kv[1])[:5])
        parts.append(f'<rect class="bar-failed" x="{x + 1:.1f}" y="{base_y - h:.1f}" '
                     f'width="{max(1.0, step - 2):.1f}" height="{h:.1f}" fill="{COLOURS["failed"]}"><title>{esc(day)}: '
                     f'{n:,} failed{esc(" (" + classes + ")" if classes else "")}</title></rect>'
                     f'<text class="bar-number" x="{x + step / 2:.1f}" y="{base_y - h - 3:.1f}" font-size="10" '
                     f'fill="#800" text-anchor="middle">{n:,}</text>')
    return _svg("failures", label, HEIGHT, "".join(parts))


def states_chart(rses: Sequence[Mapping[str, Any]]) -> str:
    """One bar per RSE: its current generation's files by state, as shares of the planned files; each bar
    ends with its count of files, and each segment wide enough shows its own."""
    rows = [(r["name"], r.get("counters") or {}) for r in rses if (r.get("counters") or {}).get("to_delete")]
    if not rows:
        return '<p class="muted">Files by state: no plan recorded yet.</p>'
    name_w, row_h, count_w = 190, 18, 70
    height = 24 + row_h * len(rows) + 8
    parts = [_legend(STATE_SERIES, 14)]
    for i, (name, c) in enumerate(rows):
        y = 24 + i * row_h
        total = sum(int(c.get(k) or 0) for k in STATE_SERIES)
        parts.append(_text(name_w - 6, y + 12, name if len(name) <= 28 else name[:27] + "…", "end"))
        x = float(name_w)
        for k in STATE_SERIES:
            n = int(c.get(k) or 0)
            w = (WIDTH - name_w - count_w) * n / max(1, total)
            if w > 0:
                parts.append(f'<rect class="seg-{k}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 4}" '
                             f'fill="{COLOURS[k]}"><title>{esc(name)}: {n:,} {esc(k.replace("_", " "))}</title></rect>')
                if w >= label_width(f"{n:,}"):
                    parts.append(f'<text class="seg-count" x="{x + w / 2:.1f}" y="{y + 11}" font-size="10" '
                                 f'fill="#fff" text-anchor="middle">{n:,}</text>')
                x += w
        parts.append(_text(WIDTH - count_w + 6, y + 12, f"{total:,} files", cls="bar-total"))
    return _svg("states", "Files by state per RSE (current generation)", height, "".join(parts))


def timeline_chart(cycles: Sequence[Mapping[str, Any]], now: Optional[float] = None) -> str:
    """The recent polling cycles on a time axis: green without failure, red with, grey while running."""
    timed = [c for c in cycles if isinstance(c.get("started"), (int, float))]
    if not timed:
        return '<p class="muted">Cycle timeline: no polling cycle recorded yet.</p>'
    now = now or time.time()
    start = min(c["started"] for c in timed)
    end = max(now, *(c.get("finished") or c["started"] for c in timed))
    span = max(1.0, end - start)
    plot_w, y, h = WIDTH - 2 * PAD, 22, 30
    parts = [f'<line x1="{PAD}" y1="{y + h + 2}" x2="{WIDTH - PAD}" y2="{y + h + 2}" stroke="#999"/>']
    for c in sorted(timed, key=lambda c: c["started"]):
        finished = c.get("finished")
        failures = c.get("failures") or []
        kind = "running" if finished is None else ("failed" if failures else "ok")
        colour = {"running": "#bbb", "failed": "#c33", "ok": "#3a7"}[kind]
        x = PAD + plot_w * (c["started"] - start) / span
        w = max(3.0, plot_w * ((finished or now) - c["started"]) / span)
        why = "; ".join(f"{f.get('source')}: {f.get('reason')}" + (f" ({f.get('rse')})" if f.get("rse") else "")
                        for f in failures[:10]) or kind
        parts.append(f'<rect class="cycle-{kind}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{h}" fill="{colour}">'
                     f"<title>{esc(time.strftime('%Y-%m-%d %H:%M', time.gmtime(c['started'])))} UTC: "
                     f"{esc(why)}</title></rect>")
    parts += [_text(PAD, y + h + 16, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(start))),
              _text(WIDTH - PAD, y + h + 16, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(end)), "end"),
              _text(PAD, 14, f"{len(timed)} cycles: green no failure, red with failures, grey running")]
    return _svg("timeline", "Polling cycle timeline with failures", y + h + 24, "".join(parts))
