"""The worker's manifest reader: each refusal by its reason, in the order they are checked, and a Job's defaults."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from MSUnmerged.worker import defaults, paths
from MSUnmerged.worker.manifest import JobRefused, parse_manifest, read_manifest
from worker_kit import manifest

LFN = "/store/unmerged/a/b/c/d/f.root"


def _refusal(man: dict[str, Any]) -> str:
    with pytest.raises(JobRefused) as exc:
        parse_manifest(man)
    return str(exc.value)


def _with(drop: tuple[str, ...] = (), **step: Any) -> dict[str, Any]:
    man = manifest([LFN], **step)
    for key in drop:
        del man["task"]["steps"][0][key]
    return man


@pytest.mark.parametrize("man, why", [
    ([], "manifest version None is not 2"),
    (dict(_with(), version=1), "manifest version 1 is not 2"),
    ({k: v for k, v in _with().items() if k != "rse"}, "manifest lacks or mistypes 'rse'"),
    (dict(_with(), task={"steps": []}), "manifest must hold exactly one DeleteFiles step, has 0"),
    (_with(retries=True), "DeleteFiles.retries has the wrong type"),
    (_with(include="/store/unmerged/a"), "DeleteFiles.include has the wrong type"),
    # Every key's type is checked before any required key is missed, in the table's order.
    (_with(("lfns", "scan_started"), protected_until="soon", dry_run=1), "DeleteFiles.dry_run has the wrong type"),
    (_with(("lfns", "scan_started"), protected_until="soon"), "DeleteFiles.protected_until has the wrong type"),
    (_with(("lfns", "scan_started", "protected_until")), "DeleteFiles step has no lfns"),
    (_with(("scan_started", "protected_until"), pfn_layout="odd"),
     "DeleteFiles.scan_started is missing: the scan the plan comes from is unknown"),
    (_with(("protected_until",), pfn_layout="odd"),
     "DeleteFiles.protected_until is missing: how long its protected list holds is unknown"),
    (_with(pfn_layout="odd", mapping_check="rucio"),
     "DeleteFiles.pfn_layout 'odd' is not one of standard, site_specific"),
    (_with(pfn_layout="site_specific"),
     "DeleteFiles.pfn_layout site_specific needs unmerged_root (jobs.sites.<RSE>.unmerged_root)"),
    (_with(mapping_check="rucio"), "DeleteFiles.mapping_check 'rucio' does not fit unmerged_pfn None"),
])
def test_a_manifest_is_refused_for_its_first_problem(man: Any, why: str) -> None:
    assert _refusal(man) == why


def test_a_bare_step_takes_the_defaults_and_bounds_what_it_gives() -> None:
    bare = _with(("remove_dirs", "keep_dirs", "protected", "dry_run", "file_timeout_s", "retries", "backoff_s",
                  "max_consecutive_denied"))
    job = parse_manifest(bare)
    assert (job.lfns, job.remove_dirs, job.keep_dirs, job.protected, job.retry_dirs, job.dry_run, job.timeout,
            job.retries, job.backoff, job.max_denied, job.unmerged_pfn, job.mapping_check, job.pfn_layout,
            job.unmerged_root, job.sweep, job.floor, job.include, job.exclude.paths, job.max_ops_per_s, job.look,
            job.protected_at) == \
        ([LFN], [], [], [], [], True, defaults.FILE_TIMEOUT_S, defaults.RETRIES, defaults.BACKOFF_S,
         defaults.MAX_CONSECUTIVE_DENIED, None, "site_config_only", "standard", None, False, paths.MIN_DIR_DEPTH,
         None, frozenset(), defaults.MAX_OPS_PER_S, defaults.LOOK_BEFORE_DELETE, None)
    bounded = parse_manifest(_with(retries=-2, backoff_s=-1, max_consecutive_denied=0, dir_floor_depth=1,
                                   max_ops_per_s=-5, keep_dirs=["/store/unmerged/k", 7], include=["/store//x/", 1],
                                   protected_at=5))
    assert (bounded.retries, bounded.backoff, bounded.max_denied, bounded.floor, bounded.max_ops_per_s,
            bounded.keep_dirs, bounded.include.paths, bounded.protected_at) == \
        (0, 0.0, 1, paths.MIN_DIR_DEPTH, 0.0, ["/store/unmerged/k"], frozenset({"/store/x"}), 5.0)


@pytest.mark.parametrize("text, why", [
    ('{"a": 1, "a": 2}', "key 'a' appears twice"),
    ('{"a": NaN}', "NaN is not JSON"),
])
def test_a_manifest_file_is_read_strictly(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(text)
    with pytest.raises(JobRefused, match=f"cannot read manifest {path}: {why}"):
        read_manifest(str(path))
    path.write_text(json.dumps(_with()))
    assert read_manifest(str(path)).lfns == [LFN]
