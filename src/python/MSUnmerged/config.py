"""Typed service configuration: one object, loaded from a TOML file plus environment overrides."""
from __future__ import annotations

import dataclasses
import os
import re
import tomllib
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from MSUnmerged import planlines
from MSUnmerged.worker import defaults as job_defaults
from MSUnmerged.worker.paths import MAX_LFN, MIN_DIR_DEPTH
from MSUnmerged.worker.pfn import LAYOUTS as PFN_LAYOUTS, form_problem as pfn_form_problem

ENV_PREFIX = "MSUNMERGED_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Skips and failures kept in an RSE's ledger document: the ones every reader shows (REST API, page, CLI, alerts),
# and the most repeats `alerts.guard_repeats` can count. Each scrape reads every RSE document whole (SecantusDB loads
# a document whole whatever the projection), so no more: the longer history is each polling cycle's per-RSE result
# (ledger/cycles.py). Here, below the ledger, so that both the ledger and this module's checks read it.
EVENTS_KEPT = 10
# Package data: in the tree a link to etc/msunmerged.toml (the documented defaults), in a wheel its copy.
DEFAULT_CONFIG = resources.files("MSUnmerged") / "msunmerged.toml"

# Production WMCore MSUnmerged excludes the log areas of production workflows.
DEFAULT_EXCLUDES = [
    "/store/unmerged/logs/prod/",
    "/store/unmerged/data/logs/prod/",
    "/store/unmerged/hidata/logs/prod/",
    "/store/unmerged/express/logs/prod/",
]


class ConfigError(ValueError):
    """A configuration value is missing, unknown or invalid; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"configuration key '{key}': {message}")
        self.key = key


@dataclass
class ServiceConfig:
    instance: str = ""  # empty: hostname-pid
    partition: str = ""  # the RSE partition served (t1, t2t3, ...): metrics' and alerts' `partition`; empty: instance
    state_dir: str = "~/.msunmerged"
    interval_s: int = 3600
    parallel_rses: int = 4
    # While a cycle's largest RSE (much larger than the rest, service/hold.py) has not submitted its first batch,
    # half the threads run: at most this long (a stuck run cannot stall the cycle); 0: no hold.
    largest_first_hold_s: int = 120
    dry_run: bool = True
    lease_ttl_s: int = 600
    log_level: str = "INFO"
    # Also write the log to <log_dir>/ms-unmerged-<YYYYMMDD>-<host>.log, a new file each UTC day, as CMSWEB
    # services do for their filebeat side-car; empty: stderr only.
    log_dir: str = ""
    alert_after_cycles: int = 3  # the page and data/status alert when no cycle succeeded for this many intervals
    # How long a run may use the cycle's ConMon `stats` read instead of reading it itself (service/scans.py).
    stats_reuse_s: float = 300.0

    @property
    def stale_after_s(self) -> float:
        """Age of the last good cycle past which the operator is alerted."""
        return float(self.alert_after_cycles * self.interval_s)

    @property
    def partition_label(self) -> str:
        """The `partition` label of the metrics' msunmerged_info and of pushed alerts: partition, else instance."""
        return self.partition or self.instance


@dataclass
class PlannerConfig:
    rse_expression: str = "cms_type=real&rse_type=DISK"
    skip_rses: list[str] = field(default_factory=list)
    include: list[str] = field(default_factory=list)  # empty: everything under /store/unmerged/
    exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDES))
    files_per_job: int = 2000
    max_lfn_length: int = 1024
    # Emptied directories are removed down to this many path components
    # (7 = /store/unmerged/<era>/<primary>/<tier>/<procstr-vN>), never above.
    dir_floor_depth: int = 7
    spill_partitions: int = 64
    partition_max_bytes: int = 8 * 1024 * 1024
    engine: str = planlines.AUTO  # the per-line work: compiled when built ("auto"), "compiled" or "pure"
    # The throttle: at most this many files of an RSE's plan are released per cycle, oldest directories first
    # (throttle.py); the rest in the next cycles of the same dump. 0: the whole plan at once.
    max_files_per_cycle: int = 0


@dataclass
class GuardConfig:
    max_scan_age_h: float = 14 * 24.0
    max_protected_shrink: float = 0.5  # fraction of the previous protected-list size
    max_delete_fraction: float = 0.95
    max_delete_files: int = 20_000_000
    check_line_count: bool = True


@dataclass
class ConMonConfig:
    url: str = "https://cmsweb.cern.ch/rucioconmon/unmerged"
    format: str = "raw"  # raw | text | json
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0
    retries: int = 3
    backoff_s: float = 2.0


@dataclass
class WMStatsConfig:
    url: str = "https://cmsweb.cern.ch/wmstatsserver"
    t0_url: str = ""  # empty: no Tier-0 source
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 2.0


@dataclass
class RucioConfig:
    host: str = "https://cms-rucio.cern.ch"
    auth_host: str = "https://cms-rucio-auth.cern.ch"
    account: str = "wmcore_transferor"
    auth_type: str = "x509"  # x509 | x509_proxy | userpass | oidc token
    username: str = ""
    password_file: str = ""
    timeout_s: float = 60.0


@dataclass
class AuthConfig:
    """Credentials for outgoing HTTPS calls (ConMon, WMStats, Rucio)."""

    cert: str = ""
    key: str = ""
    proxy: str = ""
    ca_path: str = ""
    token_file: str = ""


@dataclass
class MongoConfig:
    url: str = ""  # empty: embedded SecantusDB under service.state_dir
    database: str = "msunmerged"
    replica_set: str = ""
    username: str = ""
    password_file: str = ""
    password_setting: str = ""  # empty: password_file holds the password; else its setting in a WMCore config
    generations_kept: int = 3
    cycles_kept_days: float = 30.0  # polling-cycle records; the daily aggregates are kept for ever
    embedded_port: int = 0  # 0: pick a free loopback port


BACKENDS = ("local", "condor", "slurm")  # jobs.backend, jobs.sites.<RSE>.backend


@dataclass
class SiteConfig:
    """jobs.sites.<RSE>: how that RSE's jobs run; an empty value means the service-wide one."""

    site: str = ""  # the RSE's CMS site (sites.resolve_site: else Rucio's attribute, else the RSE's name)
    backend: str = ""  # local | condor | slurm; empty: jobs.backend
    siteconfig: str = ""  # SITECONFIG_PATH of its jobs, on every backend; empty: the node's own
    credential: str = ""  # token | proxy | none; empty: jobs.credential
    pool: str = ""  # condor: collector of its schedd; empty: condor.pool
    schedd: str = ""  # condor: its schedd; empty: condor.schedd
    pfn_layout: str = "standard"  # "site_specific": its PFNs need not end with the LFN (docs/jobs.md)
    unmerged_root: str = ""  # site_specific (required there): the PFN of /store/unmerged/ the site config must give
    # Overrides of the service-wide limits (None: the service-wide value; sitelimits.py resolves them).
    max_files_per_cycle: Optional[int] = None  # planner.max_files_per_cycle for this RSE
    max_in_flight: Optional[int] = None  # jobs.max_in_flight for this RSE
    max_ops_per_s: Optional[float] = None  # jobs.max_ops_per_s for this RSE
    look_before_delete: Optional[bool] = None  # jobs.look_before_delete for this RSE
    # Path filters of this RSE on top of planner.include/exclude (same component-wise rule, re-checked at the worker).
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    remove_empty_dirs: bool = False  # the worker also removes old empty directories below the datasets it cleans


@dataclass
class JobsConfig:
    backend: str = "local"  # local | condor | slurm
    deadline_h: float = 48.0
    # A job's defaults live with the worker (worker/defaults.py), which uses them for a setting its manifest lacks.
    file_timeout_s: float = job_defaults.FILE_TIMEOUT_S
    retries: int = job_defaults.RETRIES
    max_consecutive_denied: int = job_defaults.MAX_CONSECUTIVE_DENIED
    request_memory_mb: int = job_defaults.MEMORY_MB
    request_disk_mb: int = job_defaults.DISK_MB
    max_runtime_s: int = job_defaults.RUNTIME_S
    local_parallel: int = 2
    # Niceness added to the service's for the local backend's workers (0-19): they yield the host's CPU to it.
    local_nice: int = 10
    # Jobs built, recorded as intent, submitted and marked together: the first go out after one batch is
    # built, and only one batch of file lists is in memory (or left `submitting` by a crash) at a time: at
    # 2,000 files a job, 100 jobs hold ~40 MiB of LFNs (500 held ~200 MiB, 300-400 MiB of `serve` per RSE).
    submit_batch: int = 100
    # The storage credential every job carries (docs/jobs.md): token (recommended: a WLCG token scoped
    # storage.modify:/store/unmerged), proxy (an X.509 proxy) or none; jobs.sites.<RSE>.credential overrides it.
    credential: str = "none"
    token_file: str = ""  # the storage token, a file the deployment refreshes
    proxy_file: str = ""  # the X.509 proxy (as CMSWEB mounts it)
    # SITECONFIG_PATH of every job whose RSE sets none (jobs.sites.<RSE>.siteconfig); empty: the node's own
    # (the pilot's SITECONFIG_PATH, else $CMS_PATH/SITECONF/local on CVMFS).
    siteconfig: str = ""
    # The RSE attribute in Rucio naming its CMS site (e.g. "site"), read where jobs.sites.<RSE>.site is not set;
    # empty: the site comes from the configuration or the RSE's name only (sites.resolve_site).
    site_attribute: str = ""
    # Load limits (docs/jobs.md): cleanup jobs of one RSE in the batch system at once (0: no limit), storage
    # operations per second of one job (0: unpaced), and the look at each file before it is deleted.
    max_in_flight: int = 100
    max_ops_per_s: float = job_defaults.MAX_OPS_PER_S
    look_before_delete: bool = job_defaults.LOOK_BEFORE_DELETE
    top_up_s: float = 60.0  # `serve`: collect finished jobs and submit more up to the limits this often
    # A job's manifest may be used this long after its protected list was fetched: the worker deletes nothing
    # later, and the service re-issues a waiting job before then (docs/jobs.md, "Protection no older than a bound").
    max_protection_age_s: float = job_defaults.MAX_PROTECTION_AGE_S
    # A site whose jobs find its configuration unusable (config_error) waits one polling cycle, doubled each try
    # in a row, at most this long, before one job tries it again (ledger/sitebackoff.py).
    config_error_backoff_max_h: float = 24.0
    sites: dict[str, SiteConfig] = field(default_factory=dict)  # per-RSE overrides

    def for_rse(self, rse: str) -> SiteConfig:
        """jobs.sites.<rse>, or the defaults when the RSE has none."""
        return self.sites.get(rse) or SiteConfig()

    def setting(self, rse: str, key: str) -> str:
        """jobs.sites.<rse>.<key>, else the service-wide jobs.<key> where there is one (backend, credential), else ""."""
        own = getattr(self.for_rse(rse), key)
        service_wide = key in {f.name for f in dataclasses.fields(self)}
        return str(own or (getattr(self, key) if service_wide else ""))


@dataclass
class CondorConfig:
    pool: str = ""
    schedd: str = ""
    token_dir: str = ""
    scitoken_file: str = ""
    accounting_group: str = "analysis"
    accounting_group_user: str = "msunmerged"
    hold_max_s: int = 24 * 3600
    extra_attributes: dict[str, str] = field(default_factory=dict)  # job ClassAd attributes: name -> expression
    requirements: str = ""
    ping_timeout_s: float = 30.0  # preflight; an unresponsive schedd blocks the bindings ~20 s
    delegate_proxy: bool = True  # false: a proxy credential is copied, not delegated (schedds that cannot accept one)


@dataclass
class SlurmConfig:
    """A Slurm cluster reached through slurmrestd or the command line (see docs/slurm.md).
    `sites` holds per-site overrides of these keys (site name -> {key: value as text})."""

    transport: str = "cli"  # cli | rest
    command_prefix: str = ""  # cli: prefix of sbatch/squeue/... and file commands, e.g. "ssh login.hpc"
    rest_url: str = ""  # rest: e.g. http://slurmrestd.hpc:6820
    rest_api: str = "v0.0.38"
    user: str = ""  # rest: X-SLURM-USER-NAME
    token_file: str = ""  # rest: the JWT, read anew on every call so it can be rotated
    work_dir: str = ""  # shared folder for manifests, worker and reports, seen alike by service and jobs
    partition: str = ""
    account: str = ""
    qos: str = ""
    python: str = "python3"  # the worker node's interpreter
    setup: str = ""  # shell lines run in the job before the worker, e.g. sourcing an environment
    sacct: str = "sacct"  # cli: command for jobs gone from squeue ("sacct -c" without slurmdbd; "" none)
    array_max_size: int = 1000  # at most the cluster's MaxArraySize
    array_parallel: int = 0  # at most this many tasks of one array run at once (0: no limit)
    timeout_s: float = 60.0
    sites: dict[str, dict[str, str]] = field(default_factory=dict)

    def for_site(self, site: str) -> "SlurmConfig":
        """These settings with the site's overrides applied."""
        out = dataclasses.replace(self, sites={})
        _apply(out, self.sites.get(site, {}), f"slurm.sites.{site}.")
        return out


@dataclass
class RestConfig:
    host: str = "127.0.0.1"
    port: int = 8242  # CMSWEB's port of ms-unmerged (8249 is reqmon's)
    metrics_port: int = 0  # also serve <port>/metrics alone here (CMSWEB: 18242); 0: only <base>/metrics
    base: str = "/ms-unmerged"
    hmac_key_file: str = ""
    operator_roles: list[str] = field(default_factory=lambda: ["admin:group:dmwm", "operator:group:dmwm"])
    # Who may trigger (any mode), beside holding an operator role: the front end also signs cms-authz-* headers
    # a client sent itself, so a role header alone can be forged through it. Empty: every trigger is refused
    # (closed by default).
    operator_logins: list[str] = field(default_factory=list)
    trigger_rate_per_min: int = 6
    # Refused trigger attempts (denied, refused) audited per caller in any 60 s; more are answered 429 with
    # Retry-After, unaudited but counted in the caller's next audit line (`suppressed`).
    refusals_per_min: int = 12
    audit_log: str = ""
    audit_log_max_bytes: int = 10 * 1024 * 1024  # the audit file is rotated at this size (<file>.1, .2, ...)
    audit_log_files: int = 5  # rotated audit files kept beside the current one
    thread_pool: int = 64  # request threads, a fixed number; the status and info answers are cached
    queue_size: int = 64  # accepted connections waiting for a thread; beyond it new ones wait in the kernel
    socket_timeout_s: float = 10.0  # a client silent this long mid-request is dropped, freeing its thread
    request_deadline_s: float = 10.0  # a request's line, headers and body must all arrive within this (else 408)
    # Open connections from one address; more are answered 429 at once. They hold no thread until a request's
    # headers are all here; in CMSWEB each front-end node is one address for all its users: keep it well above
    # the node's concurrency (the limits per caller below share the threads out).
    max_connections_per_client: int = 256
    # Per caller (the verified front-end login or DN, else the address; rest/limits.py): requests in progress,
    # of them streamed answers, and request starts a second (token bucket of caller_burst); more: 429.
    max_requests_per_caller: int = 8
    # Requests in progress of all callers known only by their address together (direct clients: probes,
    # scrapers, anyone reaching the pod): the rest of the threads stay for the front end's verified users.
    max_requests_unverified: int = 32
    max_streams_per_caller: int = 2
    caller_requests_per_s: float = 20.0
    caller_burst: int = 40
    max_body_bytes: int = 65536  # larger request bodies are refused (413) before any authentication
    # status/info answers are rebuilt, and an RSE's current generation and a job's document (what per-file pages
    # start from) are read again, at most this often (0: never cached)
    cache_ttl_s: float = 2.0
    db_timeout_s: float = 5.0  # a request gives up on the ledger database after this and answers 503
    # `serve`'s liveness probe (data/health?probe=live) fails once the ledger database has not answered for
    # this long (an embedded one is restarted before that); 0: liveness never depends on the database.
    db_dead_s: float = 300.0
    operations_url: str = ""  # where docs/operations.md is published: the page links each reason to its entry
    replay_window_s: float = 86400.0  # a trigger's request_id is refused if seen within this window
    allowed_origins: list[str] = field(default_factory=list)  # Origin values a trigger may come from


@dataclass
class AlertsConfig:
    """Alerts pushed to AlertManager after each cycle (MSUnmerged.alerts; docs/operations.md, "Alerts")."""

    alertmanager_url: str = ""  # e.g. http://alertmanager:9093/api/v2/alerts; empty: no push (metrics only)
    service: str = "ms-unmerged"  # the `service` label and the alert names' prefix
    tag: str = "wmcore"  # the `tag` label AlertManager routes on (WMCore's default)
    page_url: str = ""  # the operator page as users reach it: each alert's link (generatorURL)
    stall_days: float = 3.0  # an RSE with files left and none done for this long; also a guard holding this long
    guard_repeats: int = 3  # the same guard refusing an RSE this many times in a row
    expire_cycles: int = 3  # a firing alert ends by itself unless pushed again within this many intervals
    timeout_s: float = 10.0


@dataclass
class Config:
    service: ServiceConfig = field(default_factory=ServiceConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    guards: GuardConfig = field(default_factory=GuardConfig)
    conmon: ConMonConfig = field(default_factory=ConMonConfig)
    wmstats: WMStatsConfig = field(default_factory=WMStatsConfig)
    rucio: RucioConfig = field(default_factory=RucioConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    mongo: MongoConfig = field(default_factory=MongoConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    condor: CondorConfig = field(default_factory=CondorConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    rest: RestConfig = field(default_factory=RestConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)

    @property
    def state_dir(self) -> Path:
        return Path(os.path.expanduser(self.service.state_dir))

    @property
    def local_jobs_dir(self) -> Path:
        """The local backend's job folders."""
        return self.state_dir / "local-jobs"


def _coerce(key: str, tp: Any, value: Any) -> Any:
    """Convert a TOML or environment value to the declared type, or raise ConfigError."""
    origin = typing.get_origin(tp)
    if origin is typing.Union:  # Optional[X]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else _coerce(key, args[0], value)
    if tp in _SCALARS:
        return _SCALARS[tp](key, tp, value)
    if origin in (list, dict):
        return _coerce_list(key, tp, value) if origin is list else _coerce_dict(key, tp, value)
    if dataclasses.is_dataclass(tp):  # a table of named keys, e.g. jobs.sites.<RSE>
        if not isinstance(value, dict):
            raise ConfigError(key, f"expected a table, got {value!r}")
        out = tp()
        _apply(out, value, f"{key}.")
        return out
    raise ConfigError(key, f"unsupported type {tp!r}")  # pragma: no cover - programming error


def _coerce_bool(key: str, tp: Any, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value.lower() in ("1", "true", "yes", "on")
    raise ConfigError(key, f"expected true or false, got {value!r}")


def _coerce_number(key: str, tp: Any, value: Any) -> Any:
    if isinstance(value, bool):
        raise ConfigError(key, f"expected a number, got {value!r}")
    try:
        out = tp(value)
    except (TypeError, ValueError):
        raise ConfigError(key, f"expected {tp.__name__}, got {value!r}") from None
    if tp is int and isinstance(value, float) and value != out:
        raise ConfigError(key, f"expected an integer, got {value!r}")
    return out


def _coerce_str(key: str, tp: Any, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f"expected a string, got {value!r}")
    return value


def _coerce_list(key: str, tp: Any, value: Any) -> list[Any]:
    if isinstance(value, str):  # environment: comma-separated
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list):
        raise ConfigError(key, f"expected a list, got {value!r}")
    (item_tp,) = typing.get_args(tp)
    return [_coerce(f"{key}[{i}]", item_tp, v) for i, v in enumerate(value)]


def _coerce_dict(key: str, tp: Any, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(key, f"expected a table, got {value!r}")
    _, val_tp = typing.get_args(tp)
    return {str(k): _coerce(f"{key}.{k}", val_tp, v) for k, v in value.items()}


_SCALARS: dict[Any, Callable[[str, Any, Any], Any]] = {bool: _coerce_bool, int: _coerce_number,
                                                       float: _coerce_number, str: _coerce_str}


def _apply(obj: Any, data: Mapping[str, Any], prefix: str) -> None:
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if name not in names:
            raise ConfigError(key, "unknown key")
        current = getattr(obj, name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(key, "expected a table")
            _apply(current, value, f"{key}.")
        else:
            setattr(obj, name, _coerce(key, hints[name], value))


def _env_overrides(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """MSUNMERGED_<SECTION>__<KEY>=value, e.g. MSUNMERGED_SERVICE__DRY_RUN=false."""
    out: dict[str, dict[str, str]] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        section, _, key = name[len(ENV_PREFIX):].lower().partition("__")
        out.setdefault(section, {})[key] = value
    return out


def _validate(cfg: Config) -> None:
    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(key, msg)

    g, p, s, j = cfg.guards, cfg.planner, cfg.service, cfg.jobs
    need(0.0 <= g.max_protected_shrink <= 1.0, "guards.max_protected_shrink", "must be between 0 and 1")
    need(0.0 < g.max_delete_fraction <= 1.0, "guards.max_delete_fraction", "must be in (0, 1]")
    need(g.max_delete_files >= 0, "guards.max_delete_files", "must be >= 0")
    need(g.max_scan_age_h > 0, "guards.max_scan_age_h", "must be > 0")
    need(p.files_per_job >= 1, "planner.files_per_job", "must be >= 1")
    # The worker refuses a longer path at the site (worker.paths.MAX_LFN, in characters; the planner counts
    # UTF-8 bytes, never fewer): a line the planner let through must not be refused there.
    need(64 <= p.max_lfn_length <= MAX_LFN, "planner.max_lfn_length",
         f"must be between 64 and {MAX_LFN} (the worker's own limit)")
    need(p.dir_floor_depth >= MIN_DIR_DEPTH, "planner.dir_floor_depth",
         f"must be >= {MIN_DIR_DEPTH} (never remove /store/unmerged/<x>: the worker's own floor)")
    need(1 <= p.spill_partitions <= 512, "planner.spill_partitions", "must be between 1 and 512")
    need(p.partition_max_bytes >= 1024 * 1024, "planner.partition_max_bytes", "must be >= 1 MiB")
    need(p.engine in planlines.ENGINES, "planner.engine", f"must be one of {', '.join(planlines.ENGINES)}")
    need(p.engine != planlines.COMPILED_NAME or planlines.COMPILED is not None, "planner.engine",
         "compiled, but the C extension MSUnmerged._planfast is not built (no compiler at install?)")
    _validate_limits(cfg)
    need(s.interval_s >= 1, "service.interval_s", "must be >= 1")
    need(s.parallel_rses >= 1, "service.parallel_rses", "must be >= 1")
    need(s.largest_first_hold_s >= 0, "service.largest_first_hold_s", "must be >= 0 (0: no hold)")
    need(s.lease_ttl_s >= 10, "service.lease_ttl_s", "must be >= 10")
    need(s.alert_after_cycles >= 1, "service.alert_after_cycles", "must be >= 1")
    need(s.stats_reuse_s >= 0, "service.stats_reuse_s", "must be >= 0 (0: every run reads ConMon's stats itself)")
    need(s.log_level.upper() in LOG_LEVELS, "service.log_level", f"must be one of {', '.join(LOG_LEVELS)}")
    for key, folder in (("service.state_dir", s.state_dir), ("service.log_dir", s.log_dir)):
        problem = _folder_problem(folder)
        need(problem is None, key, problem or "")
    problem = _mongo_url_problem(cfg.mongo.url)
    need(problem is None, "mongo.url", f"not a MongoDB URL: {problem}")
    need(cfg.conmon.format in ("raw", "text", "json"), "conmon.format", "must be raw, text or json")
    need(j.backend in BACKENDS, "jobs.backend", "must be " + ", ".join(BACKENDS))
    for site in ("", *cfg.slurm.sites):
        sl = cfg.slurm.for_site(site)
        need(sl.transport in ("cli", "rest"), f"slurm.sites.{site}.transport" if site else "slurm.transport",
             "must be cli or rest")
        need(1 <= sl.array_max_size, f"slurm.sites.{site}.array_max_size" if site else "slurm.array_max_size",
             "must be >= 1")
    _validate_credentials(cfg)
    uses_condor = j.backend == "condor" or any(site.backend == "condor" for site in j.sites.values())
    if uses_condor and not cfg.condor.scitoken_file:
        need(bool(cfg.condor.token_dir), "condor.token_dir", "must be set when the condor backend is used "
                                                             "(or condor.scitoken_file)")
        need(os.path.isdir(os.path.expanduser(cfg.condor.token_dir)), "condor.token_dir",
             f"{cfg.condor.token_dir} is not a directory")
    for rse, settings in j.sites.items():
        need(settings.backend in ("", *BACKENDS), f"jobs.sites.{rse}.backend", "must be " + ", ".join(BACKENDS))
        need(settings.pfn_layout in PFN_LAYOUTS, f"jobs.sites.{rse}.pfn_layout", "must be " + " or ".join(PFN_LAYOUTS))
        need(bool(settings.unmerged_root) or settings.pfn_layout != "site_specific", f"jobs.sites.{rse}.unmerged_root",
             "must be set when pfn_layout is site_specific: the PFN of /store/unmerged/ its workers must find")
        need(not settings.unmerged_root or pfn_form_problem(settings.unmerged_root) is None,
             f"jobs.sites.{rse}.unmerged_root", pfn_form_problem(settings.unmerged_root or "/") or "")
    need(j.deadline_h > 0, "jobs.deadline_h", "must be > 0")
    need(j.retries >= 0, "jobs.retries", "must be >= 0")
    need(j.submit_batch >= 1, "jobs.submit_batch", "must be >= 1")
    need(0 <= j.local_nice <= 19, "jobs.local_nice", "must be between 0 and 19")
    need(cfg.mongo.generations_kept >= 1, "mongo.generations_kept", "must be >= 1")
    need(cfg.mongo.cycles_kept_days > 0, "mongo.cycles_kept_days", "must be > 0")
    need(1 <= cfg.rest.port <= 65535, "rest.port", "must be a TCP port")
    need(0 <= cfg.rest.metrics_port <= 65535 and cfg.rest.metrics_port != cfg.rest.port, "rest.metrics_port",
         "must be 0 (none) or a TCP port other than rest.port")
    need(cfg.rest.db_timeout_s > 0, "rest.db_timeout_s", "must be > 0")
    need(cfg.rest.trigger_rate_per_min >= 1, "rest.trigger_rate_per_min", "must be >= 1")
    need(1 <= cfg.rest.thread_pool <= 1000, "rest.thread_pool", "must be between 1 and 1000")
    need(1 <= cfg.rest.queue_size <= 10000, "rest.queue_size", "must be between 1 and 10000")
    need(0 < cfg.rest.socket_timeout_s <= 300, "rest.socket_timeout_s", "must be in (0, 300]")
    need(0 < cfg.rest.request_deadline_s <= 300, "rest.request_deadline_s", "must be in (0, 300]")
    need(1 <= cfg.rest.max_connections_per_client <= 100_000, "rest.max_connections_per_client",
         "must be between 1 and 100000")
    need(1 <= cfg.rest.max_requests_per_caller < cfg.rest.thread_pool, "rest.max_requests_per_caller",
         "must be >= 1 and below rest.thread_pool (else one caller can hold every thread)")
    need(cfg.rest.max_requests_per_caller <= cfg.rest.max_requests_unverified < cfg.rest.thread_pool,
         "rest.max_requests_unverified", "must be between rest.max_requests_per_caller and rest.thread_pool - 1")
    need(1 <= cfg.rest.max_streams_per_caller <= cfg.rest.max_requests_per_caller, "rest.max_streams_per_caller",
         "must be between 1 and rest.max_requests_per_caller")
    need(cfg.rest.caller_requests_per_s > 0, "rest.caller_requests_per_s", "must be > 0")
    need(cfg.rest.caller_burst >= 1, "rest.caller_burst", "must be >= 1")
    need(cfg.rest.refusals_per_min >= 1, "rest.refusals_per_min", "must be >= 1")
    need(cfg.rest.audit_log_max_bytes >= 65536, "rest.audit_log_max_bytes", "must be >= 65536")
    need(0 <= cfg.rest.audit_log_files <= 100, "rest.audit_log_files", "must be between 0 and 100")
    need(cfg.rest.db_dead_s == 0 or cfg.rest.db_dead_s >= 10, "rest.db_dead_s", "must be 0 (off) or >= 10")
    need(1024 <= cfg.rest.max_body_bytes <= 16 * 1024 * 1024, "rest.max_body_bytes",
         "must be between 1024 and 16 MiB")
    need(cfg.rest.replay_window_s >= 60, "rest.replay_window_s", "must be >= 60")
    need(cfg.rest.cache_ttl_s >= 0, "rest.cache_ttl_s", "must be >= 0")
    a = cfg.alerts
    need(not a.alertmanager_url or re.match(r"https?://[^/\s]+", a.alertmanager_url) is not None,
         "alerts.alertmanager_url", "must be empty or an http(s):// URL")
    need(bool(a.service), "alerts.service", "must not be empty")
    need(a.stall_days > 0, "alerts.stall_days", "must be > 0")
    need(1 <= a.guard_repeats <= EVENTS_KEPT, "alerts.guard_repeats",
         f"must be between 1 and {EVENTS_KEPT} (the events an RSE document keeps)")
    need(a.expire_cycles >= 1, "alerts.expire_cycles", "must be >= 1")
    need(a.timeout_s > 0, "alerts.timeout_s", "must be > 0")


def _folder_problem(folder: str) -> Optional[str]:
    """Why `folder` (empty: none) can be no folder of ours: it, or the nearest of its parents that exists, is a file."""
    if not folder:
        return None
    path = Path(os.path.expanduser(folder))
    while not path.exists() and path != path.parent:
        path = path.parent
    return None if path.is_dir() else f"{path} is a file, not a folder"


def _validate_limits(cfg: Config) -> None:
    """The path filters, the throttle and the load limits, service-wide and per RSE."""
    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(key, msg)

    p, j, g = cfg.planner, cfg.jobs, cfg.guards
    filters = [("planner.include", p.include), ("planner.exclude", p.exclude)]
    filters += [(f"jobs.sites.{rse}.{key}", getattr(s, key)) for rse, s in j.sites.items() for key in ("include", "exclude")]
    for key, paths in filters:
        for i, path in enumerate(paths):
            need(path.startswith("/"), f"{key}[{i}]", f"must be an absolute path, got {path!r}")
    need(j.max_in_flight >= 0, "jobs.max_in_flight", "must be >= 0 (0: no limit)")
    need(j.max_ops_per_s >= 0, "jobs.max_ops_per_s", "must be >= 0 (0: unpaced)")
    need(j.top_up_s >= 1, "jobs.top_up_s", "must be >= 1")
    # Each cycle re-checks the waiting jobs: a shorter bound would let every job that waits one cycle expire.
    need(j.max_protection_age_s >= cfg.service.interval_s, "jobs.max_protection_age_s",
         f"must be >= service.interval_s ({cfg.service.interval_s}): each cycle re-checks the jobs that wait")
    need(j.config_error_backoff_max_h > 0, "jobs.config_error_backoff_max_h", "must be > 0")
    caps = [("planner.max_files_per_cycle", p.max_files_per_cycle)]
    caps += [(f"jobs.sites.{rse}.max_files_per_cycle", s.max_files_per_cycle) for rse, s in j.sites.items()
             if s.max_files_per_cycle is not None]
    for key, cap in caps:
        need(cap >= 0, key, "must be >= 0 (0: no throttle)")
        # A slice larger than the count guard would be refused every cycle.
        need(cap <= g.max_delete_files, key, f"must be at most guards.max_delete_files ({g.max_delete_files})")
    for rse, s in j.sites.items():
        need(s.max_in_flight is None or s.max_in_flight >= 0, f"jobs.sites.{rse}.max_in_flight", "must be >= 0")
        need(s.max_ops_per_s is None or s.max_ops_per_s >= 0, f"jobs.sites.{rse}.max_ops_per_s", "must be >= 0")


CREDENTIALS = ("token", "proxy", "none")  # jobs.credential: what a job carries to its storage
CREDENTIAL_FILE_KEY = {"token": "token_file", "proxy": "proxy_file"}


def _validate_credentials(cfg: Config) -> None:
    """Each RSE's credential kind is known and its service-side file is configured (its content is checked
    at submission: the deployment may still be writing it)."""
    j = cfg.jobs
    for rse in ("", *j.sites):
        kind = j.setting(rse, "credential")
        key = f"jobs.sites.{rse}.credential" if rse and j.sites[rse].credential else "jobs.credential"
        if kind not in CREDENTIALS:
            raise ConfigError(key, f"must be one of {', '.join(CREDENTIALS)}, got {kind!r}")
        if kind in CREDENTIAL_FILE_KEY and not getattr(j, CREDENTIAL_FILE_KEY[kind]):
            raise ConfigError(f"jobs.{CREDENTIAL_FILE_KEY[kind]}", f"must be set: {key} is {kind}")


def _mongo_url_problem(url: str) -> Optional[str]:
    """What is wrong with a MongoDB URL, or None (empty is fine: the embedded database).

    mongodb+srv:// URLs are checked for their form only: resolving them needs DNS.
    """
    if not url:
        return None
    if url.startswith("mongodb+srv://"):
        host = url[len("mongodb+srv://"):].split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
        return None if re.fullmatch(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+){2,}", host) else "expected one DNS name " \
            "with at least three parts after mongodb+srv://"
    from pymongo import uri_parser
    from pymongo.errors import PyMongoError
    try:
        uri_parser.parse_uri(url)
    except (PyMongoError, ValueError) as exc:
        return str(exc)
    return None


def load_config(path: Optional[os.PathLike | str] = None, env: Optional[Mapping[str, str]] = None) -> Config:
    """Load the configuration: defaults, then the TOML file (`path`, else $MSUNMERGED_CONFIG, else the packaged
    etc/msunmerged.toml), then MSUNMERGED_* environment overrides."""
    env = os.environ if env is None else env
    if path is None:
        path = env.get("MSUNMERGED_CONFIG") or DEFAULT_CONFIG
    source = Path(path) if isinstance(path, (str, os.PathLike)) else path
    try:
        data = tomllib.loads(source.read_text())
    except FileNotFoundError:
        raise ConfigError(str(source), "configuration file does not exist") from None
    except OSError as exc:
        raise ConfigError(str(source), f"cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(source), f"not valid TOML: {exc}") from None
    cfg = Config()
    _apply(cfg, data, "")
    _apply(cfg, _env_overrides(env), "")
    _validate(cfg)
    return cfg
