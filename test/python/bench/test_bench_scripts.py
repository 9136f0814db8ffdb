"""The benchmarks of bench/ still run end to end, at tiny sizes (their figures are not checked here, only that
every step happened and every operator query answered)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from MSUnmerged.ledger.base import EVENTS_KEPT

BENCH = Path(__file__).resolve().parents[3] / "bench"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def run(script: str, *argv: str) -> str:
    res = subprocess.run([sys.executable, str(BENCH / script), *argv], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_bench_scale_tiny(tmp_path: Path) -> None:
    """run_once plans, records and submits; jobs are collected; every query answers via REST and the CLI path."""
    run("bench_scale.py", "--sizes", "10000,20000", "--queries", "20000", "--collect-jobs", "1", "--clients", "2",
        "--seconds", "0.3", "--cycles", "20", "--data", str(tmp_path))
    small, big = json.loads((tmp_path / "results-scale.json").read_text())
    for row in (small, big):
        assert row["files_to_delete"] > 0 and row["jobs"] >= 1
        assert {"planned", "recorded", "intent", "submitted", "counted"} <= set(row["phases_s"])
        assert row["db_peak_rss_mib"] > 0 and row["collect"]["files"] > 0
        by_step = row["peak_rss_by_step_mib"]  # a peak so far: it never falls from one step to the next
        assert 0 < by_step["planned"] <= by_step["recorded"] <= by_step["counted"]
    assert big["files_to_delete"] > small["files_to_delete"] and "queries" not in small
    queries = big["queries"]
    assert {(q["query"], q["via"]) for q in queries if q["via"] != "database"} == {(name, via) for name in (
        "status", "info", "failed by class", "files of a job", "files under a directory", "one LFN's history")
        for via in ("rest", "cli path")}
    assert [q["query"].split(" (")[0] for q in queries if q["via"] == "database"] == [f"floor: {page}" for page in (
        "failed by class", "files of a job", "files under a directory")]
    assert all(q["requests"] > 0 and q["errors"] == 0 for q in queries), queries
    assert all({"db", "generator"} <= set(q["cpu_ms"]) for q in queries)
    assert not list(tmp_path.glob("scale-*")), "the run's state folder is left behind"


def test_bench_scale_keeps_its_ledger_and_measures_the_pages_on_it(tmp_path: Path) -> None:
    """--keep records once and leaves the ledger; the next --keep measures the pages on it, at each client count,
    through this checkout's server and one with the code of --before, beside each page's floor."""
    src = str(BENCH.parent / "src" / "python")
    common = ("--sizes", "10000", "--keep", "--collect-jobs", "1", "--cycles", "5", "--data", str(tmp_path))
    run("bench_scale.py", *common, "--queries", "1")
    assert (tmp_path / "scale-10000" / "kept.json").exists()
    assert "queries" not in json.loads((tmp_path / "results-scale.json").read_text())[0]
    run("bench_scale.py", *common, "--pages", "--clients", "1,2", "--seconds", "0.3", "--before", src)
    row, = json.loads((tmp_path / "results-scale.json").read_text())
    assert row["reused"] == str(tmp_path / "scale-10000")
    pages = ("failed by class", "files of a job", "files under a directory")
    assert sorted((q["clients"], q["query"].split(" (")[0], q["via"]) for q in row["queries"]) == sorted(
        [(n, page, via) for n in (1, 2) for page in pages for via in ("rest (before)", "rest", "cli path")]
        + [(n, f"floor: {page}", "database") for n in (1, 2) for page in pages])
    assert all(q["requests"] > 0 and q["errors"] == 0 for q in row["queries"]), row["queries"]


def test_bench_scale_apply_tiny(tmp_path: Path) -> None:
    """`run` and `apply` of the same dump each submit every job, in their own processes, with the code asked for."""
    src = str(BENCH.parent / "src" / "python")
    run("bench_scale.py", "--apply", "--sizes", "10000", "--before", src, "--data", str(tmp_path))
    rows = json.loads((tmp_path / "results-apply.json").read_text())
    assert [r["code"] for r in rows] == [src, src]
    for row in rows:
        assert row["run"]["jobs"] == row["apply"]["jobs"] >= 1 and row["run"]["code"] == row["apply"]["code"] == src
        assert row["apply"]["peak_rss_mib"] > 0 and row["apply"]["db_peak_rss_mib"] > 0
        assert {"planned", "recorded", "counted"} <= set(row["run"]["marks_s"]) and row["record_over_plan"] > 0
        for kind in ("run", "apply"):  # which step reached each peak: at every step both processes' peaks so far
            assert set(row[kind]["peak_rss_by_step_mib"]) == set(row[kind]["db_peak_rss_by_step_mib"]) \
                == set(row[kind]["marks_s"]) and row[kind]["peak_rss_by_step_mib"]["marked"] > 0
    assert not list(tmp_path.glob("apply-*")), "the run's work folder is left behind"


def test_bench_sizing_tiny(tmp_path: Path) -> None:
    """The sample is recorded, collected and retried; sizes, write counts and query plans come out; `--before`
    runs the same sample first with the given code, its results under "before"."""
    out = tmp_path / "sizing.json"
    src = str(BENCH.parent / "src" / "python")
    run("bench_sizing.py", "--rses", "1", "--lines", "4000", "--json", str(out), "--before", src)
    result = json.loads(out.read_text())
    before = result["before"]
    assert result["code"] == before["code"] == src and "before" not in before
    assert before["measured"]["files"] == result["measured"]["files"] > 0 and before["cms_wide"]["documents"] > 0
    assert list(tmp_path.iterdir()) == [out], "the child's results file is left behind"
    m = result["measured"]
    assert m["files"] > 0 and [p["phase"] for p in m["phases"]][:3] == ["record", "collect round 1", "retry round 2"]
    assert m["phases"][0]["inserted"] > 0 and m["phases"][1]["write_commands"] > 0
    assert {q["query"] for q in m["plans"]} >= {"failed by class", "files of a job", "files under a directory"}
    assert all(c["plan"] for q in m["plans"] for c in q["commands"])
    cms = result["cms_wide"]
    assert cms["documents"] > 0 and cms["data_gib"] > 0 and cms["writes_per_cycle"]["bytes_sent"] > 0


def test_bench_drain_tiny(tmp_path: Path) -> None:
    """A backlog larger than the count guard drains in slices at each cap, never over the cap, to a clean RSE."""
    run("bench_drain.py", "--files", "6000", "--slice", "1500", "--caps", "1,2", "--top-up", "0.3", "--data",
        str(tmp_path))
    result = json.loads((tmp_path / "results-drain.json").read_text())
    assert result["baseline"]["files"] == 6000 and result["baseline"]["s"] >= 0
    for row, cap in zip(result["rows"], (1, 2)):
        assert (row["cap"], row["state"], row["guarded"]) == (cap, "clean", 0)
        assert row["slices"] >= 3 and row["cycles"] > row["slices"] and 1 <= row["most_in_flight"] <= cap
        assert row["deleted"] == row["to_delete"] and row["files_left"] == 6000 - row["deleted"]
    assert not list(tmp_path.glob("drain-*")), "the run's folders are left behind"


def test_bench_metrics_tiny(tmp_path: Path) -> None:
    """RSEs with jobs recorded, each skipped more times than its document keeps; the jobs gauge sums to the job
    documents (the script checks); every timing comes out; a second run on the kept database reuses it (also with a
    spinning process beside)."""
    args = ("bench_metrics.py", "--rses", "12", "--scrapes", "2", "--cycles", "3", "--data", str(tmp_path),
            "--events", str(EVENTS_KEPT + 2))
    row = json.loads(run(*args).splitlines()[-1])
    assert row["jobs"] > 0 and row["rses"] == 12 and not row["reused"]
    assert row["events_per_rse_found"] == row["events_per_rse"] == EVENTS_KEPT
    assert row["render"]["cpu_ms"] > 0 and row["render"]["server_cpu_ms"] >= 0
    assert all(row[k]["median_ms"] > 0 for k in ("render", "rses_only", "jobs_aggregate"))
    again = json.loads(run(*args, "--busy", "1").splitlines()[-1])
    assert again["reused"] and again["jobs"] == row["jobs"] and again["busy"] == 1


def test_bench_partition_tiny(tmp_path: Path) -> None:
    """One cycle over RSEs of two sizes: every RSE submits (the script checks), each size has its figures."""
    row = json.loads(run("bench_partition.py", "--spread", "10000x1,1000x2", "--data", str(tmp_path)).splitlines()[-1])
    assert row["rses"] == 3 and row["jobs"] >= 3 and row["protected_bases"] > 4000
    assert set(row["by_size"]) == {"10000", "1000"} and row["by_size"]["1000"]["rses"] == 2
    assert all(v > 0 for v in row["peak_rss_mib"].values()) and row["db_mib"] > 0
    assert row["local_nice"] == 10 and row["workers_started"] <= row["jobs"]
    assert row["largest_start_s"] >= 0 and row["run_s_sum"] > 0
    assert row["commands_per_rse"] > 10 and "insert buckets" in row["commands_per_rse_by_kind"]  # the script counts them
    assert not (tmp_path / "partition-run").exists(), "the run's state folder is left behind"
