"""Prometheus exposition of the ledger: each scrape reads the ledger (per-RSE counters, jobs, cycles, sources,
failures, dry run) and writes the text; the per-RSE families (thousands of samples) go straight into the text
(exposition.Writer), the few others through prometheus_client's families."""
from __future__ import annotations

import time
from typing import Any, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from MSUnmerged import __version__ as VERSION
from MSUnmerged import diskspace
from MSUnmerged.alerts.rules import evaluate
from MSUnmerged.config import Config
from MSUnmerged.drainstatus import Waiting, drain
from MSUnmerged.ledger.view import LedgerView
from MSUnmerged.rest.api import STARTED
from MSUnmerged.rest.exposition import Families, Writer
from MSUnmerged.statemachine import RSEState

# exposition.Writer writes the text format 0.0.4.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LEDGER_UP = ("msunmerged_ledger_up", "1 when the ledger database answered this scrape.")
DRY_RUN = ("msunmerged_dry_run", "1 when the service runs in dry run (jobs delete nothing).")


def _value(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _gauge(spec: tuple[str, str], value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(*spec, value=value)


def info(config: Config) -> GaugeMetricFamily:
    """msunmerged_info: 1, labelled with the partition served (service.partition, else the instance) and the
    version; present in every scrape, the ledger up or not. The rules and the dashboard join it on the scrape
    target (`* on (instance, job) group_left (partition) msunmerged_info`), and a partition's down alert is its
    absence."""
    family = GaugeMetricFamily("msunmerged_info", "1: the RSE partition this instance serves, and its version.",
                               labels=["partition", "version"])
    family.add_metric([config.service.partition_label, VERSION], 1.0)
    return family


# The per-RSE families in the order a scrape writes them: (name, help, the RSE counter it shows).
RSE_COUNTERS = (("msunmerged_files_deleted", "Files deleted in the RSE's current generation.", "deleted"),
                ("msunmerged_files_to_delete", "Files planned for deletion in the current generation.", "to_delete"),
                ("msunmerged_files_would_delete", "Files a dry run found and left in the current generation.",
                 "would_delete"))
FAILED = ("msunmerged_files_failed", "Files whose deletion failed, by error class.")
FREED = ("msunmerged_bytes_freed", "Bytes freed where file sizes are known.")
STATE = ("msunmerged_rse_state", "1 for the RSE's current state, 0 for the others.")
UPDATED = ("msunmerged_rse_updated_timestamp_seconds", "Last change of the RSE's ledger state.")
PROGRESSED = ("msunmerged_rse_progress_timestamp_seconds",
              "Last time more files of the RSE were done (or a new generation began).")
JOBS = ("msunmerged_jobs", "Cleanup jobs by RSE and state (as of the RSE's last run).")
# The per-RSE drain (drainstatus.drain): (name, help, its field); a sample only where the value is known.
DRAIN = (("msunmerged_backlog_files", "Files of the current generation planned and not yet done.", "backlog_files"),
         ("msunmerged_unreleased_files", "Files in slices of a throttled plan not released yet.", "unreleased_files"),
         ("msunmerged_slices_released", "Slices of a throttled plan released so far.", "slice"),
         ("msunmerged_slices", "Slices of a throttled plan in all.", "slices"),
         ("msunmerged_drain_rate_files_per_second", "Files done per second over the RSE's recent counts.",
          "rate_files_s"),
         ("msunmerged_drain_expected_end_timestamp_seconds", "When the RSE's backlog is expected to be done.",
          "expected_end"),
         ("msunmerged_next_slice_timestamp_seconds", "When the next slice of a throttled plan is expected to be "
          "released.", "next_slice_at"))
WAITING = ("msunmerged_rse_waiting", "1 for what the RSE's backlog does now (drainstatus.Waiting), 0 for the others.")
STATES = tuple(map(str, RSEState))


# An RSE as the per-RSE families read it: its `rse` label pair (escaped), its counters, its summary.
Row = tuple[str, dict[str, Any], dict[str, Any]]


def _counter_families(w: Writer, rows: list[Row]) -> None:
    """Files deleted, to delete, would delete, failed by class; bytes freed."""
    for family, doc, key in RSE_COUNTERS:
        sample = w.family(family, doc)
        for name, c, _ in rows:
            w.sample(sample, _value(c.get(key)), name)
    sample = w.family(*FAILED)
    for name, c, _ in rows:
        for error_class, n in sorted((c.get("failed_by_class") or {}).items()):
            w.sample(sample, _value(n), w.pair("error_class", error_class), name)
    sample = w.family(*FREED)
    for name, c, _ in rows:
        w.sample(sample, _value(c.get("bytes_freed")), name)


def _state_families(w: Writer, rows: list[Row]) -> None:
    """The RSE's state, its last change and progress, its jobs by state."""
    sample = w.family(*STATE)
    for name, _, rse in rows:
        current = str(rse.get("state") or "unknown")
        for known in dict.fromkeys((*STATES, current)):  # every state, so a change shows as 1 -> 0
            w.sample(sample, float(known == current), name, w.pair("state", known))
    for (family, doc), field in ((UPDATED, "updated"), (PROGRESSED, "progress_at")):
        sample = w.family(family, doc)
        for name, _, rse in rows:
            if isinstance(rse.get(field), (int, float)):
                w.sample(sample, rse[field], name)
    sample = w.family(*JOBS)
    for name, c, _ in rows:
        for job_state, n in sorted((c.get("jobs_by_state") or {}).items()):  # counted per RSE (issue 29)
            w.sample(sample, _value(n), name, w.pair("state", str(job_state)))


def _drain_families(w: Writer, rows: list[Row], interval_s: float) -> None:
    """The RSE's drain (drainstatus.drain) now: its known values, and what its backlog waits for."""
    now = time.time()
    drains = [(name, drain(rse, now, interval_s)) for name, _, rse in rows]
    for family, doc, key in DRAIN:
        sample = w.family(family, doc)
        for name, d in drains:
            if isinstance(d.get(key), (int, float)):
                w.sample(sample, float(d[key]), name)
    sample = w.family(*WAITING)
    for name, d in drains:
        for known in Waiting:
            w.sample(sample, float(known == d["waiting"]), name, w.pair("waiting", known.value))


class LedgerFamilies:
    """Every family from the ledger view at scrape time; each one present from the start (a rule on a family
    that is absent until some first event never fires)."""

    def __init__(self, view: LedgerView, config: Config) -> None:
        self.view = view
        self.config = config

    def write(self, w: Writer) -> None:
        rses = self.view.rses()
        # One pass over the RSEs: each one's label pair escaped once, its counters read once.
        rows = [(w.pair("rse", rse["name"]), rse.get("counters") or {}, rse) for rse in rses]
        _counter_families(w, rows)
        _state_families(w, rows)
        _drain_families(w, rows, self.config.service.interval_s)
        health = self.view.health(self.config.service.stale_after_s, brief=True)  # no cycle's per-RSE results
        w.families(self._cycles(health))
        w.families([self._alerts(health, rses)])
        w.families([_gauge(DRY_RUN, float(self.config.service.dry_run)), _gauge(LEDGER_UP, 1.0), info(self.config)])
        w.families(disk_families(self.config))

    def _cycles(self, health: dict[str, Any]) -> Iterator[Metric]:
        last = health["last_cycle"] or {}
        yield GaugeMetricFamily("msunmerged_cycle_duration_seconds",
                                "Duration of the last finished polling cycle (0 before any).",
                                value=_value(last.get("duration_s")))
        yield GaugeMetricFamily("msunmerged_cycle_last_end_timestamp_seconds",
                                "End of the last polling cycle (0 before any).", value=_value(last.get("finished")))
        age = health["last_good_age_s"]
        yield GaugeMetricFamily("msunmerged_cycle_last_good_age_seconds",
                                "Seconds since the last polling cycle that finished with no failure; before any, "
                                "since the first cycle started; before any cycle, since this process started.",
                                value=age if age is not None else time.time() - STARTED)
        yield GaugeMetricFamily("msunmerged_cycle_never_good",
                                "1 while no polling cycle ever finished with no failure.",
                                value=float(bool(health["never_good"])))
        yield GaugeMetricFamily("msunmerged_cycle_alert",
                                "1 when no polling cycle succeeded for service.alert_after_cycles intervals (the "
                                "page's alert; on a new ledger counted from its first cycle).",
                                value=float(bool(health["alert"])))
        up = GaugeMetricFamily("msunmerged_source_up",
                               "1 when the source did not fail in the last finished cycle.", labels=["source"])
        for source, value in health["sources"].items():
            up.add_metric([source], value)
        yield up
        failures = CounterMetricFamily("msunmerged_cycle_failures", "Failures recorded by polling cycles.",
                                       labels=["source", "reason"])
        for (source, reason), n in sorted(self.view.failure_totals().items()):
            failures.add_metric([source, reason], n)
        yield failures

    def _alerts(self, health: dict[str, Any], rses: list[dict[str, Any]]) -> Metric:
        """The per-RSE alerts as the AlertManager push decides them (alerts.rules), one sample per firing one."""
        family = GaugeMetricFamily("msunmerged_rse_alert", "1 for each per-RSE alert firing now (alert: its kind).",
                                   labels=["rse", "alert"])
        for alert in evaluate(health, rses, self.config.alerts, time.time()):
            if alert.rse:
                family.add_metric([alert.rse, alert.kind.value], 1.0)
        return family


def disk_families(config: Config) -> list[Metric]:
    """Free space and size of the state and local jobs' folders' file systems (a full one: state_disk_full)."""
    free = GaugeMetricFamily("msunmerged_disk_free_bytes", "Bytes free on the file system of the service's folder "
                             "(state: plans, reports, the embedded database; jobs: the local jobs' folders).",
                             labels=["folder"])
    size = GaugeMetricFamily("msunmerged_disk_size_bytes", "Size of the file system of the service's folder.",
                             labels=["folder"])
    for space in diskspace.measure(diskspace.folders(config)):
        free.add_metric([space.folder], float(space.free))
        size.add_metric([space.folder], float(space.size))
    return [free, size]


def _text(writer: Writer, *collectors: Collector) -> str:
    for collector in collectors:
        writer.families(collector.collect())
    return writer.text()


def render(view: LedgerView, config: Config, *extra: Collector) -> str:
    """All metric families in one text answer (with those of `extra`, e.g. serve's database watch)."""
    writer = Writer()
    LedgerFamilies(view, config).write(writer)
    return _text(writer, *extra)


def render_down(config: Config, dry_run: bool, *extra: Collector) -> str:
    """What a scrape gets while the database is unreachable: the up gauge at 0, the dry-run flag, the info, `extra`."""
    return _text(Writer(), Families(_gauge(LEDGER_UP, 0.0), _gauge(DRY_RUN, float(dry_run)), info(config)), *extra)
