"""The job manifest as the worker reads it: strict JSON, checked key by key against one table (Job's fields) and
returned as a typed Job, or refused with why (MSUnmerged.jobs.spec writes it)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from . import defaults, paths, pfn
from .ids import MANIFEST_VERSION

_NONE = type(None)
_NUMBER = (int, float)
_REQUIRED = object()  # the default of a key whose absence refuses the job


class JobRefused(Exception):
    """The job must not run (exit 2)."""


class StepKey(NamedTuple):
    """How a Job field comes from a key of the manifest's DeleteFiles step."""

    key: str
    kind: Any  # the JSON type(s) its value may have; a boolean is never taken for a number
    default: Any  # when the key is absent (taken as a value is); _REQUIRED: refused with `missing`
    take: Callable[[Any], Any]  # the value (already of `kind`) as the field holds it
    missing: str


def _step(key: str, kind: Any, default: Any = _REQUIRED, take: Callable[[Any], Any] = lambda v: v,
          missing: str = "") -> Any:
    return field(metadata={"step": StepKey(key, kind, default, take, missing)})


def _at_least(low: Any, kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: max(low, kind(value))


def _strings(values: List[Any]) -> List[str]:
    return [v for v in values if isinstance(v, str)]


def _path_set(values: Optional[List[Any]]) -> Optional[paths.PathSet]:
    return None if values is None else paths.PathSet(_strings(values))


@dataclass(frozen=True)
class Job:
    """The manifest's content the worker acts on. The fields after `deadline` are the DeleteFiles step's, each with
    its key, type, default and how it is taken (in the order they are checked)."""

    job_id: str
    rse: str
    site: str
    deadline: float
    lfns: List[Any] = _step("lfns", list, take=list, missing="DeleteFiles step has no lfns")
    remove_dirs: List[Any] = _step("remove_dirs", list, (), list)
    keep_dirs: List[str] = _step("keep_dirs", list, (), _strings)
    protected: List[str] = _step("protected", list, (), _strings)
    dry_run: bool = _step("dry_run", bool, True)
    timeout: float = _step("file_timeout_s", _NUMBER, defaults.FILE_TIMEOUT_S, float)
    retries: int = _step("retries", int, defaults.RETRIES, _at_least(0, int))
    backoff: float = _step("backoff_s", _NUMBER, defaults.BACKOFF_S, _at_least(0.0, float))
    max_denied: int = _step("max_consecutive_denied", int, defaults.MAX_CONSECUTIVE_DENIED, _at_least(1, int))
    unmerged_pfn: Optional[str] = _step("unmerged_pfn", (str, _NONE), None)
    mapping_check: str = _step("mapping_check", str, pfn.mapping_check(None))
    pfn_layout: str = _step("pfn_layout", str, "standard")
    unmerged_root: Optional[str] = _step("unmerged_root", (str, _NONE), None)
    # Fail closed: without it a file changed since the scan looks unchanged.
    scan_started: float = _step("scan_started", _NUMBER, take=float, missing=(
        "DeleteFiles.scan_started is missing: the scan the plan comes from is unknown"))
    # Directories an earlier plan of the RSE gave as removable and that are not removed yet: removed when
    # empty, with every directory check but that they hold a file of this job.
    retry_dirs: List[Any] = _step("retry_dirs", list, (), list)
    sweep: bool = _step("sweep_empty_dirs", bool, False)
    floor: int = _step("dir_floor_depth", int, paths.MIN_DIR_DEPTH, _at_least(paths.MIN_DIR_DEPTH, int))
    include: Optional[paths.PathSet] = _step("include", (list, _NONE), None, _path_set)
    exclude: paths.PathSet = _step("exclude", list, (), _path_set)
    max_ops_per_s: float = _step("max_ops_per_s", _NUMBER, defaults.MAX_OPS_PER_S, _at_least(0.0, float))
    look: bool = _step("look_before_delete", bool, defaults.LOOK_BEFORE_DELETE)
    protected_at: Optional[float] = _step("protected_at", _NUMBER, None, lambda v: None if v is None else float(v))
    # Fail closed: without it the protected list may be of any age.
    protected_until: float = _step("protected_until", _NUMBER, take=float, missing=(
        "DeleteFiles.protected_until is missing: how long its protected list holds is unknown"))


STEP_KEYS: Tuple[Tuple[str, StepKey], ...] = tuple((f.name, f.metadata["step"]) for f in fields(Job)
                                                   if "step" in f.metadata)


def _delete_files_step(data: Any) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(the job's own fields, its one DeleteFiles step) of a manifest of this version."""
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        raise JobRefused("manifest version %r is not %d" % (
            data.get("version") if isinstance(data, dict) else None, MANIFEST_VERSION))
    try:
        own = {"job_id": str(data["job_id"]), "rse": str(data["rse"]), "site": str(data["site"]),
               "deadline": float(data["deadline"])}
        steps = [s for s in data["task"]["steps"] if s.get("type") == "DeleteFiles"]
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise JobRefused("manifest lacks or mistypes %s" % exc) from None
    if len(steps) != 1:
        raise JobRefused("manifest must hold exactly one DeleteFiles step, has %d" % len(steps))
    return own, steps[0]


def _settings_problem(job: Job) -> Optional[str]:
    """Why the step's PFN settings do not fit together, or None."""
    if job.pfn_layout not in pfn.LAYOUTS:
        return "DeleteFiles.pfn_layout %r is not one of %s" % (job.pfn_layout, ", ".join(pfn.LAYOUTS))
    if job.pfn_layout == "site_specific" and job.unmerged_root is None:
        return "DeleteFiles.pfn_layout site_specific needs unmerged_root (jobs.sites.<RSE>.unmerged_root)"
    if job.unmerged_root is not None and pfn.form_problem(job.unmerged_root) is not None:
        return "DeleteFiles.unmerged_root: %s" % pfn.form_problem(job.unmerged_root)
    if job.mapping_check != pfn.mapping_check(job.unmerged_pfn):
        return "DeleteFiles.mapping_check %r does not fit unmerged_pfn %r" % (job.mapping_check, job.unmerged_pfn)
    return None


def parse_manifest(data: Any) -> Job:
    """The Job a parsed manifest describes: every key of its step of the right type (first), the required ones
    present (then), the PFN settings fitting together (last); JobRefused with the first problem found."""
    own, step = _delete_files_step(data)
    for _, spec in STEP_KEYS:
        value = step.get(spec.key)
        if spec.key in step and (not isinstance(value, spec.kind) or isinstance(value, bool) and spec.kind is not bool):
            raise JobRefused("DeleteFiles.%s has the wrong type" % spec.key)
    for _, spec in STEP_KEYS:
        if spec.default is _REQUIRED and step.get(spec.key) is None:
            raise JobRefused(spec.missing)
    job = Job(**own, **{name: spec.take(step.get(spec.key, spec.default)) for name, spec in STEP_KEYS})
    why = _settings_problem(job)
    if why is not None:
        raise JobRefused(why)
    return job


def _unique_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError("key %r appears twice" % key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError("%s is not JSON" % name)


def read_manifest(path: str) -> Job:
    """The manifest, read as bytes and parsed strictly (UTF-8, no repeated keys, no NaN/Infinity)."""
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
        return parse_manifest(json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant))
    except (OSError, ValueError) as exc:
        raise JobRefused("cannot read manifest %s: %s" % (path, exc)) from None
