"""make_job: the job files of a real plan -> CleanupJobs with their dirs and protection."""
from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Iterable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from MSUnmerged import planner
from MSUnmerged.config import Config, SiteConfig
from MSUnmerged.jobs.spec import CleanupJob, ProtectedBases, file_dirs, held_dirs, job_dirs, json_lines, make_job
from MSUnmerged.lfn import normalise_base
from MSUnmerged.worker.manifest import parse_manifest, read_manifest
from MSUnmerged.worker.ids import MANIFEST_VERSION
from MSUnmerged.worker.paths import MIN_DIR_DEPTH, ancestors, depth

B = "/store/unmerged/Run2024F/Muon0/AOD/PromptReco-v1"


def test_jobs_from_a_real_plan(tmp_path: Path) -> None:
    cfg = Config()
    cfg.planner.files_per_job = 3
    cfg.guards.max_delete_fraction = 1.0
    lfns = [f"{B}/000/380/001/a{i}.root" for i in range(4)] + [f"{B}/000/381/001/p.root", f"{B}/00000/c.root"]
    protected = [f"{B}/000/381", "/store/unmerged/Other/X/AOD/v1"]
    plan = planner.plan("T2_XX_A", [("\n".join(lfns) + "\n").encode()], protected, cfg, tmp_path / "plan",
                        require_scan=False)
    assert plan.files_to_delete == 5 and plan.jobs == 2
    now = time.time()
    removable = set((tmp_path / "plan" / "dirs.txt").read_text().split())
    jobs = [make_job(f"T2_XX_A:1700000000:1-{n:06d}", "T2_XX_A", "T2_XX", path.read_text().split(), removable,
                     ProtectedBases(protected), cfg, 1700000000.0, now)
            for n, path in enumerate(sorted((tmp_path / "plan" / "jobs").iterdir()), 1)]
    assert sorted(f for j in jobs for f in j.step.lfns) == sorted(lfns[:4] + [lfns[5]])
    for job in jobs:
        assert job.deadline == now + cfg.jobs.deadline_h * 3600 and job.step.dry_run is True
        assert job.step.file_timeout_s == cfg.jobs.file_timeout_s and job.site == "T2_XX"
        files_dirs = {f.rsplit("/", 1)[0] for f in job.step.lfns}
        # Every removable dir of the job holds one of its files; none holds the protected base.
        assert all(any(d == fd or fd.startswith(d + "/") for fd in files_dirs) for d in job.step.remove_dirs)
        assert f"{B}/000" not in job.step.remove_dirs and B not in job.step.remove_dirs
        depths = [d.count("/") for d in job.step.remove_dirs]
        assert depths == sorted(depths, reverse=True)  # leaf first
    first = jobs[0]
    assert f"{B}/000/380/001" in first.step.remove_dirs and f"{B}/000/380" in first.step.remove_dirs
    assert first.step.protected == [f"{B}/000/381"] and f"{B}/000" in first.step.keep_dirs
    # The manifest round-trips and keeps its format.
    path = first.write_manifest(tmp_path / "m.json")
    again = CleanupJob.from_manifest(json.loads(path.read_text()))
    assert again == first and json.loads(path.read_text())["version"] == MANIFEST_VERSION
    step = first.manifest()["task"]["steps"][0]
    assert (step["unmerged_pfn"], step["mapping_check"], step["pfn_layout"], step["scan_started"]) == \
        (None, "site_config_only", "standard", None)


def test_make_job_carries_the_mapping_check_and_scan_start() -> None:
    cfg = Config()
    cfg.jobs.sites = {"T2_XX_A": SiteConfig(pfn_layout="site_specific", unmerged_root="root://se//disk/tmp/")}
    lfns = [f"{B}/00000/a.root"]
    job = make_job("T2_XX_A:1:1", "T2_XX_A", "T2_XX", lfns, set(), ProtectedBases([]), cfg,
                   unmerged_pfn="root://se//store/unmerged/", scan_started=1700000000.5)
    assert (job.step.unmerged_pfn, job.step.mapping_check, job.step.pfn_layout, job.step.scan_started) == \
        ("root://se//store/unmerged/", "rucio", "site_specific", 1700000000.5)
    # What the service writes is what the worker reads.
    worker_job = parse_manifest(json.loads(json.dumps(job.manifest())))
    assert (worker_job.unmerged_pfn, worker_job.mapping_check, worker_job.pfn_layout, worker_job.scan_started) == \
        ("root://se//store/unmerged/", "rucio", "site_specific", 1700000000.5)
    assert job.step.unmerged_root == worker_job.unmerged_root == "root://se//disk/tmp/"
    other = make_job("T2_YY_B:1:1", "T2_YY_B", "T2_YY", lfns, set(), ProtectedBases([]), cfg)
    assert (other.step.mapping_check, other.step.pfn_layout, other.step.unmerged_root) == \
        ("site_config_only", "standard", None)


def test_a_manifest_without_settings_gets_the_configuration_defaults() -> None:
    """A manifest leaving out its resources and step settings: the service (from_manifest) and the worker take
    the same defaults as the configuration's [jobs]."""
    defaults = Config().jobs
    job = make_job("T2_XX_A:1:1", "T2_XX_A", "T2_XX", [f"{B}/00000/a.root"], set(), ProtectedBases([]), Config(),
                   scan_started=1700000000.0)
    bare = job.manifest()
    del bare["resources"]
    step = bare["task"]["steps"][0]
    for key in ("file_timeout_s", "retries", "max_consecutive_denied", "max_ops_per_s", "look_before_delete"):
        del step[key]
    again = CleanupJob.from_manifest(json.loads(json.dumps(bare)))
    assert (again.request_memory_mb, again.request_disk_mb, again.max_runtime_s) == \
        (defaults.request_memory_mb, defaults.request_disk_mb, defaults.max_runtime_s)
    worker_job = parse_manifest(json.loads(json.dumps(bare)))
    assert (worker_job.timeout, worker_job.retries, worker_job.max_denied, worker_job.max_ops_per_s, worker_job.look) \
        == (defaults.file_timeout_s, defaults.retries, defaults.max_consecutive_denied, defaults.max_ops_per_s,
            defaults.look_before_delete)


def test_relevant_protection_and_dirs() -> None:
    lfns = [f"{B}/00000/a.root"]
    bases, keep = ProtectedBases([f"{B}/000/380//", f"{B}0/x", "/store/unmerged/Z/Y/X/W"]).for_job(lfns,
                                                                                                   file_dirs(lfns))
    # Bases sharing a directory of depth >= 5 with the job are relevant (a sibling dataset too: safe
    # over-inclusion); one in another tree is not. Their ancestors among the job's dirs are kept.
    assert bases == [f"{B}/000/380", f"{B}0/x"]
    assert keep == ["/store/unmerged/Run2024F/Muon0", "/store/unmerged/Run2024F/Muon0/AOD", B]
    assert job_dirs(file_dirs(lfns), {f"{B}/00000", B, "/store/unmerged/Run2024F", f"{B}/000"}) == \
        [f"{B}/00000", B, "/store/unmerged/Run2024F"]


def reference_protection(lfns: Sequence[str], protected: Iterable[str]) -> tuple[list[str], list[str]]:
    """The former per-job scan of the whole protected list: the model ProtectedBases must agree with."""
    files = set(lfns)
    dirs: set[str] = set()
    for name in files:
        dirs.update(ancestors(name))
    bases, keep = set(), set()
    for raw in protected:
        base = normalise_base(raw).decode("utf-8", errors="surrogateescape")
        chain = [base] + [a for a in ancestors(base) if depth(a) >= MIN_DIR_DEPTH]
        if base in files or base in dirs or any(a in dirs for a in chain):
            bases.add(base)
            keep.update(a for a in chain if a in dirs and depth(a) >= MIN_DIR_DEPTH)
    return sorted(bases), sorted(keep)


# Few names, so that files and bases share directories at every depth; a base may be a file, sit above
# /store/unmerged/<x>, carry repeated or trailing slashes.
_part = st.sampled_from(["a", "b", "c"])
_lfn = st.lists(_part, min_size=1, max_size=6).map(lambda p: "/store/unmerged/" + "/".join(p) + ".root")
_base = st.one_of(st.lists(_part, min_size=0, max_size=6).map(lambda p: "/store/unmerged/" + "/".join(p)),
                  _lfn, st.sampled_from(["/store", "/", "/store/unmerged//a/", "/store//unmerged/b/c//"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_lfn, min_size=1, max_size=8), min_size=1, max_size=4), st.lists(_base, max_size=12))
def test_prepared_protection_answers_like_the_per_job_scan(jobs: list[list[str]], protected: list[str]) -> None:
    prepared = ProtectedBases(protected)  # once, then asked for every job
    for lfns in jobs:
        assert prepared.for_job(lfns, file_dirs(lfns)) == reference_protection(lfns, protected)


def test_prepared_protection_on_the_real_samples(protected_lfns: list[str], conmon_dump_lfns: list[str]) -> None:
    """WMStats' protected list against jobs of ConMon's unmerged files, and against the protected bases'
    own neighbourhoods (files under, beside and above them)."""
    rng = random.Random(18)
    near = [f"{b}/000/{i}.root" for b in rng.sample(protected_lfns, 50) for i in range(2)]
    near += [b.rsplit("/", 1)[0] + "/other-v9/1.root" for b in rng.sample(protected_lfns, 50)]
    pool = conmon_dump_lfns + near
    prepared = ProtectedBases(protected_lfns)
    relevant = 0
    for _ in range(200):
        lfns = rng.sample(pool, rng.choice([1, 10, 100]))
        got = prepared.for_job(lfns, file_dirs(lfns))
        assert got == reference_protection(lfns, protected_lfns)
        relevant += bool(got[0])
    assert relevant > 50  # the real list does meet these jobs


@settings(max_examples=300, deadline=None)
@given(st.lists(_lfn, max_size=30), st.booleans())
def test_file_dirs_are_every_ancestor_of_every_file_in_any_order(lfns: list[str], ordered: bool) -> None:
    """file_dirs skips the files of the directory it has just seen (a job's files come sorted): the same answer,
    sorted or not."""
    names = sorted(lfns) if ordered else lfns
    assert file_dirs(names) == {d for name in names for d in ancestors(name)}


def test_a_manifest_has_one_lfn_a_line_and_the_worker_reads_it_back(tmp_path: Path) -> None:
    """One LFN a line (ASCII: escaped) for the operators who read a manifest at the site; the worker reads it whole."""
    config = Config()
    lfns = [f"{B}/000/{i:03d}/file-\u00e9\"{i}.root" for i in range(300)]
    job = make_job("T2_CH_Test:1700000000:1:1", "T2_CH_Test", "T2_CH_Test", lfns, {f"{B}/000/001", B},
                   ProtectedBases([f"{B}/000/002"]), config, generation=1700000000.5, unmerged_pfn="root://x//u/",
                   scan_started=1699999000.0, retry_dirs=[f"{B}/999"])
    text = job.manifest_bytes().decode("ascii")
    assert sum(line.strip().startswith(f'"{B}/000/') for line in text.splitlines()) >= len(lfns)
    assert json.loads(text) == job.manifest() and CleanupJob.from_manifest(json.loads(text)).lfns == lfns
    read = read_manifest(str(job.write_manifest(tmp_path / "manifest.json")))  # as the worker reads it
    assert (read.job_id, read.lfns) == (job.job_id, lfns)


def test_a_directory_job_is_given_the_removable_directories_holding_its_retried_ones() -> None:
    """A directory job (no file) of the dump that planned its directories: remove_dirs are the plan's removable
    directories among its retried ones and those holding them (`held_dirs`), leaf first; no other."""
    removable = {f"{B}/000/111", f"{B}/000", B, f"{B}/001", f"{B}/000/112/x"}
    job = make_job("T2_CH_Test:1700000000:3:2", "T2_CH_Test", "T2_CH_Test", [], removable, ProtectedBases([]),
                   Config(), scan_started=1699999000.0, retry_dirs=[f"{B}/000/112", f"{B}/000/111"])
    assert job.step.remove_dirs == [f"{B}/000/111", f"{B}/000", B]
    assert job.step.retry_dirs == [f"{B}/000/111", f"{B}/000/112"]
    assert held_dirs([], job.step.retry_dirs) == {f"{B}/000/111", f"{B}/000/112", *ancestors(f"{B}/000/111")}


def test_a_manifest_without_files_and_one_with_undecodable_names_read_back_whole(tmp_path: Path) -> None:
    """A directory job (no LFN) and a job whose LFNs and retried directories hold bytes that are not UTF-8
    (surrogate escapes), quotes and an "lfns": [] or a "protected": [] of their own (a key's place is where its list
    goes): the worker reads back exactly the job's fields."""
    config = Config()
    empty = make_job("T2_CH_Test:1700000000:1:2", "T2_CH_Test", "T2_CH_Test", [], set(), ProtectedBases([]), config,
                     scan_started=1699999000.0, retry_dirs=[f"{B}/999"])
    odd = [f'{B}/000/"lfns": []\udcff{i}.root' for i in range(3)]
    named = make_job("T2_CH_Test:1700000000:1:3", "T2_CH_Test", "T2_CH_Test", odd, set(), ProtectedBases([]), config,
                     scan_started=1699999000.0, retry_dirs=[f'{B}/001/"protected": []\udcff', f'{B}/001/"lfns": []'])
    for job in (empty, named):
        text = job.manifest_bytes().decode("ascii")
        assert json.loads(text) == job.manifest()
        read = read_manifest(str(job.write_manifest(tmp_path / f"{job.job_id[-1]}.json")))
        assert (read.job_id, read.lfns) == (job.job_id, job.lfns)


@given(st.lists(st.text(st.sampled_from([chr(c) for c in range(0x80)] + ["\u00e9", "\udcff", "\u2028"]), max_size=8),
                min_size=1, max_size=6), st.booleans())
def test_json_lines_writes_each_string_as_json_does(strings: list[str], plain: bool) -> None:
    """json_lines (a manifest's LFNs): each string exactly as json.dumps writes it, one a line, whether every string
    is plain printable ASCII (joined whole) or not (encoded one by one)."""
    if plain:
        strings = ["".join(c for c in s if " " <= c <= "~" and c not in '"\\') for s in strings]
    assert json_lines(strings) == ",\n".join(json.dumps(s) for s in strings)
    assert json.loads(f"[{json_lines(strings)}]") == strings
