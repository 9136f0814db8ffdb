"""Alerts where CMS looks: the rules (pure), their push to a real AlertManager on loopback (fired, then resolved),
the service loop pushing after its cycles, the same decisions in the metrics, and the shipped Prometheus rules
checked by promtool against what the service exposes."""
from __future__ import annotations

import datetime
import json
import logging
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pymongo.database import Database

from MSUnmerged import __version__
from MSUnmerged.alerts import AlertKind, AlertManager, Notifier, evaluate
from MSUnmerged.alerts.rules import rse_alerts
from MSUnmerged.config import AlertsConfig, Config
from MSUnmerged.ledger import Ledger
from MSUnmerged.ledger.view import MongoLedgerView, health_of
from MSUnmerged.rest import metrics
from servers import free_port
from servers.alertmanager import AlertManagerServer

REPO = Path(__file__).resolve().parents[3]
DAY = 86400.0
NOW = 1_800_000_000.0


def rse(name: str = "T2_AL_Site", **fields: Any) -> dict[str, Any]:
    """An RSE as LedgerView.rses answers it."""
    return {"name": name, "state": "running", "reason": "", "generation": NOW - 10 * DAY,
            "plan": {"planned": NOW - 9 * DAY}, "counters": {"pending": 0, "failed": 0, "unknown": 0}, **fields}


def kinds(alerts: list[Any]) -> list[str]:
    return sorted(a.kind.value for a in alerts)


def rfc3339_seconds(text: str) -> float:
    """AlertManager's time stamp (RFC 3339, nanoseconds, Z) as epoch seconds."""
    text = re.sub(r"(\.\d{6})\d*", r"\1", text.replace("Z", "+00:00"))
    return datetime.datetime.fromisoformat(text).timestamp()


RULES = REPO / "deploy" / "prometheus" / "ms-unmerged-rules.yaml"


def rule_labels() -> dict[str, tuple[dict[str, str], set[str]]]:
    """Each shipped rule's alertname: its fixed labels and the labels its expression keeps (its outer `by`)."""
    out = {}
    for rule in yaml.safe_load(RULES.read_text())["groups"][0]["rules"]:
        kept = re.match(r"\(?\s*(?:max|min|sum) by \(([^)]*)\)", rule["expr"])
        out[rule["alert"]] = (rule["labels"], {k.strip() for k in kept.group(1).split(",")} if kept else set())
    return out


def test_no_progress_for_days_with_files_left() -> None:
    cfg = AlertsConfig(stall_days=3)
    stuck = rse(progress_at=NOW - 4 * DAY, counters={"pending": 10, "failed": 5, "unknown": 0})
    (alert,) = rse_alerts(stuck, cfg, NOW)
    assert alert.kind == AlertKind.RSE_NO_PROGRESS and alert.rse == "T2_AL_Site" and alert.severity == "medium"
    assert "15 files left" in alert.description and "4.0 days" in alert.summary
    assert rse_alerts({**stuck, "progress_at": NOW - 2 * DAY}, cfg, NOW) == []  # progress two days ago
    assert rse_alerts({**stuck, "state": "clean"}, cfg, NOW) == []
    assert rse_alerts({**stuck, "counters": {"would_delete": 10}}, cfg, NOW) == []  # nothing left to do
    no_stamp = {k: v for k, v in stuck.items() if k != "progress_at"}  # a ledger from before progress_at: planned
    assert kinds(rse_alerts(no_stamp, cfg, NOW)) == ["rse_no_progress"]


def test_the_same_guard_again_and_again() -> None:
    cfg = AlertsConfig(guard_repeats=3, stall_days=3)
    guard = {"state": "guarded", "reason": "protected_list_shrank"}
    events = [{"at": NOW - 3600 * i, **guard} for i in (3, 2, 1)]
    guarded = rse(state="guarded", reason="protected_list_shrank", events=events)
    assert kinds(rse_alerts(guarded, cfg, NOW)) == ["rse_guarded"]
    assert "refused 3 times in a row" in rse_alerts(guarded, cfg, NOW)[0].summary
    twice = {**guarded, "events": [{"at": NOW - 7200, "state": "guarded", "reason": "delete_count_exceeded"},
                                   *events[1:]]}
    assert rse_alerts(twice, cfg, NOW) == []  # another reason broke the run: 2 in a row
    old_twice = {**twice, "events": [{**e, "at": NOW - 4 * DAY} for e in twice["events"]]}
    assert kinds(rse_alerts(old_twice, cfg, NOW)) == ["rse_guarded"]  # holding for longer than stall_days


def test_stale_scan_and_refused_mapping() -> None:
    cfg = AlertsConfig()
    stale = rse(state="skipped", reason="scan_stale", detail="scan ended 20 days ago")
    (alert,) = rse_alerts(stale, cfg, NOW)
    assert alert.kind == AlertKind.RSE_SCAN_STALE and "20 days" in alert.description
    refused = rse(state="done_with_errors", progress_at=NOW,
                  counters={"failed": 7, "failed_by_class": {"mapping_disagrees": 5, "timeout": 2}})
    (alert,) = rse_alerts(refused, cfg, NOW)
    assert alert.kind == AlertKind.RSE_MAPPING_REFUSED and "mapping_disagrees 5" in alert.description
    assert rse_alerts(rse(counters={"failed_by_class": {"timeout": 2}}, progress_at=NOW), cfg, NOW) == []


def test_cycles_failing_is_the_health_alert() -> None:
    (alert,) = evaluate({"alert": "no polling cycle succeeded for 200 min", "last_good_age_s": 12000.0,
                         "age_from": NOW - 12000}, [], AlertsConfig(), NOW)
    assert (alert.kind, alert.severity, alert.rse, alert.since) == (AlertKind.CYCLES_FAILING, "high", "", NOW - 12000)
    assert evaluate({"alert": ""}, [rse()], AlertsConfig(), NOW) == []


def test_the_cycles_alert_starts_at_the_same_instant_at_every_push() -> None:
    """Its start is the recorded time stamp, not `now` minus the page's rounded age: two pushes a moment apart
    carry the same startsAt (CI once saw it move by 90 ms between two pushes)."""
    first = 1796286341.2317
    starts = set()
    for now in (first + 3600.04, first + 3601.17, first + 3602.96):
        health = health_of([{"finished": now - 1, "failures": [{"reason": "rucio_http_status"}]}], {}, first,
                           stale_after_s=600, now=now)
        assert health["last_good_age_s"] == round(now - first, 1) and health["alert"]
        (alert,) = evaluate(health, [], AlertsConfig(), now)
        starts.add(alert.since)
    assert starts == {first}


def test_an_alert_starts_when_its_problem_began() -> None:
    cfg = AlertsConfig(stall_days=3, guard_repeats=3)
    (stuck,) = rse_alerts(rse(progress_at=NOW - 4 * DAY, counters={"pending": 10}), cfg, NOW)
    assert stuck.since == NOW - 4 * DAY
    events = [{"at": NOW - 3600 * i, "state": "guarded", "reason": "protected_list_shrank"} for i in (3, 2, 1)]
    (guarded,) = rse_alerts(rse(state="guarded", reason="protected_list_shrank", events=events), cfg, NOW)
    assert guarded.since == NOW - 3 * 3600
    (stale,) = rse_alerts(rse(state="skipped", reason="scan_stale"), cfg, NOW)
    assert stale.since is None  # unknown: the push starts it when first seen


def test_a_pushed_alert_carries_the_labels_of_the_rule_for_the_same_problem() -> None:
    """One problem, one alert in AlertManager: the push's labels are exactly those of the rule's alert (its fixed
    labels and the labels its expression keeps), so the two merge."""
    rules = rule_labels()
    config = alerting_config("http://127.0.0.1:9/api/v2/alerts")
    cfg = AlertsConfig(stall_days=3)
    firing = evaluate({"alert": "failing", "last_good_age_s": 7200.0, "age_from": NOW - 7200},
                      [rse(progress_at=NOW - 4 * DAY, counters={"pending": 3}),
                       rse("T2_AL_Stale", state="skipped", reason="scan_stale")], cfg, NOW)
    body = AlertManager(config).payload(firing, [], NOW, {})
    assert len(body) == 3
    for pushed in body:
        labels = pushed["labels"]
        fixed, kept = rules[labels["alertname"]]
        assert set(labels) == {"alertname", *fixed, *kept}, labels
        assert {k: labels[k] for k in fixed} == fixed and labels["partition"] == "t1"
        assert pushed["startsAt"] < pushed["endsAt"]


def alerting_config(url: str, **service: Any) -> Config:
    config = Config()
    config.service.instance, config.service.partition = "ms-unmer-t1", "t1"
    config.service.interval_s, config.service.alert_after_cycles = 600, 1
    for key, value in service.items():
        setattr(config.service, key, value)
    config.alerts.alertmanager_url = url
    config.alerts.page_url = "https://cmsweb.cern.ch/ms-unmerged"
    return config


def failing_ledger(db: Database, started_ago: float) -> Ledger:
    """Two failed cycles, the first `started_ago` seconds ago, and an RSE guarded three cycles in a row."""
    ledger = Ledger(db)
    for slot in (1, 2):
        ledger.cycles.end_cycle(ledger.cycles.start_cycle("ms-unmer-t1", slot, []), failures=[
            {"source": "rucio", "reason": "rucio_http_status", "detail": "503", "rse": ""}])
    db.meta.update_one({"_id": "cycles"}, {"$inc": {"first_started": -started_ago}})
    for _ in range(3):
        ledger.base.set_rse_state("T1_AL_Guarded", "guarded", "protected_list_shrank", "the list lost 80%")
    return ledger


@pytest.mark.integration
@pytest.mark.slow
def test_push_reaches_alertmanager_then_resolves(mongo_db: Database, alertmanager: AlertManagerServer) -> None:
    before = time.time()
    ledger = failing_ledger(mongo_db, started_ago=3600)
    config = alerting_config(alertmanager.push_url)
    notifier = Notifier(config, Ledger(mongo_db).view())
    assert notifier.after_cycle() == 2
    got = {a["labels"]["alertname"]: a for a in alertmanager.alerts(partition="t1")}
    assert set(got) == {"MSUnmergedCyclesFailing", "MSUnmergedRSEStalled"}
    cycles, guarded = got["MSUnmergedCyclesFailing"], got["MSUnmergedRSEStalled"]
    # WMCore's labels (MSCore.sendAlert / AlertManagerAPI) plus ours; its annotations.
    assert cycles["labels"] == {"alertname": "MSUnmergedCyclesFailing", "severity": "high", "tag": "wmcore",
                                "service": "ms-unmerged", "partition": "t1"}
    assert set(cycles["annotations"]) == {"hostname", "summary", "description"}
    assert "rucio_http_status" in cycles["annotations"]["description"]
    assert guarded["labels"] == {"alertname": "MSUnmergedRSEStalled", "severity": "medium", "tag": "wmcore",
                                 "service": "ms-unmerged", "partition": "t1", "rse": "T1_AL_Guarded",
                                 "alert": "rse_guarded"}
    assert guarded["generatorURL"] == "https://cmsweb.cern.ch/ms-unmerged/rse?name=T1_AL_Guarded"
    assert guarded["status"]["state"] == "active"
    # startsAt: when the problem began (the cycles: since the first cycle's start an hour ago; the guard: its
    # first refusal in the run), before the push and before endsAt.
    starts = {name: rfc3339_seconds(a["startsAt"]) for name, a in got.items()}
    assert abs(starts["MSUnmergedCyclesFailing"] - (before - 3600)) < 60
    assert before - 60 < starts["MSUnmergedRSEStalled"] <= time.time()
    assert all(starts[name] < rfc3339_seconds(a["endsAt"]) for name, a in got.items())

    time.sleep(1.1)
    assert notifier.after_cycle() == 2  # pushed again: still one alert each (same labels), started as before
    again = {a["labels"]["alertname"]: a for a in alertmanager.alerts(partition="t1")}
    assert len(again) == 2 and {name: rfc3339_seconds(a["startsAt"]) for name, a in again.items()} == starts

    ledger.cycles.end_cycle(ledger.cycles.start_cycle("ms-unmer-t1", 3, []))  # a good cycle
    ledger.base.set_rse_state("T1_AL_Guarded", "planned")
    assert notifier.after_cycle() == 2  # both resolved (endsAt now)
    deadline = time.monotonic() + 30
    while alertmanager.alerts(partition="t1") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alertmanager.alerts(partition="t1") == []
    assert notifier.after_cycle() == 0  # nothing fires, nothing to resolve: nothing sent


@pytest.mark.integration
def test_a_new_ledger_does_not_alert_at_its_first_failure(mongo_db: Database) -> None:
    failing_ledger(mongo_db, started_ago=0)  # failing, but for less than alert_after_cycles intervals
    config = alerting_config("http://127.0.0.1:9/api/v2/alerts")
    alerts = Notifier(config, Ledger(mongo_db).view()).current()
    assert kinds(alerts) == ["rse_guarded"]


class BriefSpy(MongoLedgerView):
    """The real view, noting the `brief` of each health() asked of it."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger)
        self.asked: list[bool] = []

    def health(self, stale_after_s: float, brief: bool = False) -> dict[str, Any]:
        self.asked.append(brief)
        return super().health(stale_after_s, brief)


@pytest.mark.integration
def test_the_notifier_reads_the_brief_health_and_decides_alike(mongo_db: Database) -> None:
    """Alerts need only what the brief health keeps (the /metrics read): the same alerts as from the full one."""
    failing_ledger(mongo_db, started_ago=3600)
    config = alerting_config("http://127.0.0.1:9/api/v2/alerts")
    view = BriefSpy(Ledger(mongo_db))
    alerts = Notifier(config, view).current()
    assert view.asked == [True]
    full = evaluate(view.health(config.service.stale_after_s), view.rses(), config.alerts, time.time())
    assert kinds(alerts) == kinds(full) == ["cycles_failing", "rse_guarded"]
    (cycles,) = [a for a in alerts if a.kind == AlertKind.CYCLES_FAILING]
    assert "rucio_http_status" in cycles.description


@pytest.mark.integration
def test_an_unreachable_alertmanager_is_one_log_line(mongo_db: Database, caplog: pytest.LogCaptureFixture) -> None:
    failing_ledger(mongo_db, started_ago=3600)
    config = alerting_config(f"http://127.0.0.1:{free_port()}/api/v2/alerts")
    caplog.set_level(logging.WARNING, logger="MSUnmerged.alerts")
    assert Notifier(config, Ledger(mongo_db).view()).after_cycle() == 0
    (line,) = [r.getMessage() for r in caplog.records]
    assert "did not take 2 alerts" in line and "Connection refused" in line


@pytest.mark.integration
def test_metrics_carry_the_same_decisions_from_the_start(mongo_db: Database) -> None:
    config = alerting_config("")
    view = Ledger(mongo_db).view()
    empty = {(m.name, tuple(sorted(s.labels.items()))): s.value
             for m in text_string_to_metric_families(metrics.render(view, config)) for s in m.samples}
    # Before any cycle: every cycle gauge is there (a rule on an absent series never fires).
    for name in ("msunmerged_cycle_last_good_age_seconds", "msunmerged_cycle_alert", "msunmerged_cycle_never_good",
                 "msunmerged_cycle_duration_seconds", "msunmerged_cycle_last_end_timestamp_seconds"):
        assert (name, ()) in empty, name
    assert empty[("msunmerged_cycle_alert", ())] == 0 and empty[("msunmerged_cycle_never_good", ())] == 1
    failing_ledger(mongo_db, started_ago=3600)
    text = metrics.render(view, config)
    got = {(m.name, tuple(sorted(s.labels.items()))): s.value
           for m in text_string_to_metric_families(text) for s in m.samples}
    assert got[("msunmerged_cycle_alert", ())] == 1 and got[("msunmerged_cycle_last_good_age_seconds", ())] > 3500
    assert got[("msunmerged_rse_alert", (("alert", "rse_guarded"), ("rse", "T1_AL_Guarded")))] == 1
    info = (("partition", "t1"), ("version", __version__))
    assert got[("msunmerged_info", info)] == 1 and empty[("msunmerged_info", info)] == 1
    down = {(m.name, tuple(sorted(s.labels.items()))): s.value
            for m in text_string_to_metric_families(metrics.render_down(config, True)) for s in m.samples}
    assert down[("msunmerged_info", info)] == 1 and down[("msunmerged_ledger_up", ())] == 0
    assert "# TYPE msunmerged_rse_alert gauge" in metrics.render(Ledger(mongo_db.client["t_empty_x"]).view(),
                                                                config)


def metric_names(text: str) -> set[str]:
    return {s.name for m in text_string_to_metric_families(text) for s in m.samples} | \
        {m.name for m in text_string_to_metric_families(text)}


@pytest.mark.integration
def test_shipped_rules_pass_promtool_and_name_exposed_metrics(mongo_db: Database,
                                                             prometheus_tools: tuple[str, str]) -> None:
    rules = RULES
    out = subprocess.run([prometheus_tools[1], "check", "rules", str(rules)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    failing_ledger(mongo_db, started_ago=3600)
    exposed = metric_names(metrics.render(Ledger(mongo_db).view(), alerting_config("")))
    groups = yaml.safe_load(rules.read_text())["groups"]
    exprs = [r["expr"] for g in groups for r in g["rules"]]
    named = {w for e in exprs for w in re.findall(r"msunmerged_[a-z_]+", e)}
    assert named and named <= exposed, named - exposed


@pytest.mark.integration
def test_promtool_rule_tests_fire_as_documented(prometheus_tools: tuple[str, str]) -> None:
    """deploy/prometheus/ms-unmerged-rules.test.yaml: series in, alerts out, run by promtool itself."""
    tests = REPO / "deploy" / "prometheus" / "ms-unmerged-rules.test.yaml"
    out = subprocess.run([prometheus_tools[1], "test", "rules", tests.name], capture_output=True, text=True,
                         timeout=120, cwd=tests.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


@pytest.mark.integration
def test_grafana_dashboard_queries_exposed_metrics(mongo_db: Database) -> None:
    board = json.loads((REPO / "deploy" / "grafana" / "ms-unmerged.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 8 and board["title"] and board["uid"]
    failing_ledger(mongo_db, started_ago=3600)
    exposed = metric_names(metrics.render(Ledger(mongo_db).view(), alerting_config("")))
    named = {w for e in exprs for w in re.findall(r"msunmerged_[a-z_]+", e)}
    assert named <= exposed | {"msunmerged_cycle_failures_total"}, named - exposed
    assert board["templating"]["list"][1]["query"] == "label_values(msunmerged_info, partition)"
    assert all("msunmerged_info" in e for e in exprs)  # every panel per partition (joined to msunmerged_info)


@pytest.mark.integration
def test_grafana_dashboard_queries_are_promql(prometheus_tools: tuple[str, str], tmp_path: Path) -> None:
    """promtool parses every panel's query (as a recording rule, $partition as Grafana fills it in)."""
    board = json.loads((REPO / "deploy" / "grafana" / "ms-unmerged.json").read_text())
    exprs = [t["expr"].replace("$partition", "t1|t2t3") for p in board["panels"] for t in p.get("targets", [])]
    rules = tmp_path / "board.yaml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "board", "rules": [
        {"record": f"board:panel{i}", "expr": e} for i, e in enumerate(exprs)]}]}))
    out = subprocess.run([prometheus_tools[1], "check", "rules", str(rules)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and f"{len(exprs)} rules found" in out.stdout, out.stdout + out.stderr


def test_an_alert_never_carries_a_credential() -> None:
    """A detail quoted from a ledger written before redaction covered every form (issue 38: `password=`,
    `token:`, Basic credentials passed into alerts) is redacted in the payload itself."""
    detail = "GET https://u:S3CRET1@h/x?access_token=S3CRET2 password=S3CRET3 Authorization: Basic S3CRET4 token: S3CRET5"
    [alert] = rse_alerts(rse(state="failed", reason="scan_stale", detail=detail), AlertsConfig(), time.time())
    assert "S3CRET" in alert.description  # what the rules quote as the ledger has it
    payload = json.dumps(AlertManager(Config()).payload([alert], [], time.time(), {}))
    assert "S3CRET" not in payload and "<redacted>" in payload
