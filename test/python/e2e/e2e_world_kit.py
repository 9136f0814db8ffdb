"""The end-to-end world: every real server at once on 127.0.0.1, and the service's configuration for it.

`start_world` starts
  - a SecantusDB (MongoDB wire protocol) server of its own, so a test can stop and restart it;
  - the real Rucio server (shared `rucio_server` fixture) behind a fault proxy (503, hang, garbage),
    with CMS-like RSEs (attribute country=XE) that the service's RSE expression selects;
  - the real HTCondor pool (shared `condor_pool` fixture) playing two sites, T2_XE_Alpha and T2_XE_Beta:
    each has its own site-local-config.xml and storage.json under /srv/e2e/siteconf/<site> inside the
    pool's chroot, and posix storage under /srv/e2e/storage/<RSE>. Jobs of both sites run on the pool's
    slot; the job attribute `Environment` (a ClassAd expression on DESIRED_Sites) points each job's
    SITECONFIG_PATH at its own site, as the glidein of that site would;
  - FakeCMSWeb (ConMon stats and dumps, WMStats protected list) serving dumps generated here.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from pymongo import MongoClient

from MSUnmerged.ledger import Ledger
from MSUnmerged.samplesite import AGE_S
from e2e.e2e_layout_kit import ABSENT, Layout
from servers import free_port, server_dir
from servers.condor import JOB_UID, CondorPool
from servers.fault_proxy import FaultProxy
from servers.http_fakes import FakeCMSWeb
from servers.mongo import MongoServer
from servers.rucio import ROOT_PASS, ROOT_USER, RucioServer, add_cms_rse

SITES = ("T2_XE_Alpha", "T2_XE_Beta")
SITECONF_ROOT = "/srv/e2e/siteconf"  # inside the pool's chroot
STORAGE_ROOT = "/srv/e2e/storage"
EXPRESSION = "country=XE&cms_type=real&rse_type=DISK"
DB = "msunmerged_e2e"
ACTIVE: list["World"] = []  # the running world, for failure messages (`diagnose`)


@dataclass
class World:
    pool: CondorPool
    web: FakeCMSWeb
    mongo: MongoServer
    rucio: RucioServer
    proxy: FaultProxy
    dir: Path
    config_path: Path
    rses: dict[str, Layout] = field(default_factory=dict)  # every RSE known to Rucio
    extra_protected: list[str] = field(default_factory=list)
    rest_port: int = field(default_factory=free_port)  # the service's REST app

    # -- storage and sources -------------------------------------------------------------------------

    def storage(self, rse: str, lfn: str = "") -> Path:
        return self.pool.inside(f"{STORAGE_ROOT}/{rse}{lfn}")

    def create_files(self, lay: Layout, owner: int = JOB_UID, dir_mode: int = 0o755) -> None:
        """Files of every fate except ABSENT; everything owned by `owner` (root = the job cannot delete)."""
        root = self.storage(lay.rse)
        written = time.time() - AGE_S  # before the scan that will list them (workers refuse newer files)
        for lfn, fate in lay.fates.items():
            if fate == ABSENT:
                continue
            path = self.storage(lay.rse, lfn)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(lfn)
            os.utime(path, (written, written))
        for dirpath, _, files in os.walk(root):
            os.chown(dirpath, owner, owner)
            os.chmod(dirpath, dir_mode)
            for f in files:
                os.chown(os.path.join(dirpath, f), owner, owner)

    def publish(self, lay: Layout, end_time: Optional[float] = None, dump: Optional[list[str]] = None) -> None:
        """ConMon serves this dump with a finished scan ending at end_time (default: a scan of the files as they
        are now, which starts and ends now: workers refuse files changed, by their ctime, after it started)."""
        lay.end_time = time.time() if end_time is None else end_time
        if dump is not None:
            lay.dump = dump
        self.web.add_rse(lay.rse, list(lay.dump), end_time=lay.end_time,
                         start_time=lay.end_time if end_time is None else None)
        self.refresh_protected()

    def refresh_protected(self) -> None:
        bases = [b for lay in self.rses.values() for b in lay.protected] + self.extra_protected
        self.web.protected = sorted(set(bases))

    def add_rse(self, lay: Layout) -> None:
        """Register the RSE in Rucio (the expression selects it) and in its site's storage.json."""
        client = self.rucio.admin_client()
        # Rucio maps /store/unmerged/ where the site's storage.json does: the jobs check that they agree.
        add_cms_rse(client, lay.rse, site=lay.site, country="XE", posix=True, prefix=f"{STORAGE_ROOT}/{lay.rse}")
        self.rses[lay.rse] = lay
        self.write_siteconf()
        self.storage(lay.rse).mkdir(parents=True, exist_ok=True)
        os.chown(self.storage(lay.rse), JOB_UID, JOB_UID)
        self.refresh_protected()

    def write_siteconf(self) -> None:
        for site in SITES:
            conf = self.pool.inside(f"{SITECONF_ROOT}/{site}")
            (conf / "JobConfig").mkdir(parents=True, exist_ok=True)
            rses = sorted(r for r, lay in self.rses.items() if lay.site == site)
            methods = "".join(f'    <method volume="{r}_posix" protocol="posix" command="cp"/>\n' for r in rses)
            (conf / "JobConfig" / "site-local-config.xml").write_text(
                f'<site-local-config>\n<site name="{site}">\n  <stage-out>\n{methods}  </stage-out>\n'
                f'</site>\n</site-local-config>\n')
            volumes = [{"site": site, "volume": f"{r}_posix", "rse": r, "type": "DISK",
                        "protocols": [{"protocol": "posix", "access": "site-rw",
                                       "prefix": f"{STORAGE_ROOT}/{r}"}]} for r in rses]
            (conf / "storage.json").write_text(json.dumps(volumes, indent=1))

    # -- the ledger ----------------------------------------------------------------------------------

    def db(self) -> Any:
        if getattr(self, "_client", None) is None:
            self._client: MongoClient = MongoClient(self.mongo.url, serverSelectionTimeoutMS=20000)
        return self._client[DB]

    def files(self, rse: str) -> dict[str, dict[str, Any]]:
        """The current generation's file records of the RSE: LFN -> record."""
        db = self.db()
        doc = db.rses.find_one({"_id": rse}) or {}
        gen = doc.get("generation")
        out = {}
        if gen is None:
            return out
        for rec in Ledger(db).reads.file_records(rse, gen):
            out[rec["lfn"]] = rec
        return out

    def rse_doc(self, rse: str) -> dict[str, Any]:
        db = self.db()
        return db.rses.find_one({"_id": rse}) or {}

    # -- condor --------------------------------------------------------------------------------------

    def condor(self, *argv: str, check: bool = True) -> str:
        env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG"}
        done = subprocess.run(["chroot", str(self.pool.root), *argv], capture_output=True, text=True,
                              timeout=60, env=env)
        if check and done.returncode != 0:
            raise AssertionError(f"{argv}: {done.returncode} {done.stdout} {done.stderr}")
        return done.stdout

    def our_condor_jobs(self, rse_prefix: str = "T2_XE_") -> list[dict[str, Any]]:
        """Queue and history ads of this harness's jobs (MSUnmergedJobId starting with rse_prefix) that could run:
        still in the queue, or started at least once. A record the schedd removed before it ever started (a spool
        that failed) is not one: the service submits that job again (docs/jobs.md, "Batch-system faults"). Only
        this world's ledger's: the pool is shared, and other sessions' runs of the same tests leave jobs of the
        same ids."""
        ledger = (self.db().meta.find_one({"_id": "ledger"}) or {}).get("instance_id", "")
        constraint = f'regexp("^{rse_prefix}", MSUnmergedJobId) && MSUnmergedLedger =?= "{ledger}"'
        out = []
        for cmd in (["condor_q", "-allusers"], ["condor_history"]):
            text = self.condor(*cmd, "-constraint", constraint, "-af", "MSUnmergedJobId", "ClusterId",
                               "ProcId", "JobStatus", "NumJobStarts", "ExitCode")
            for line in text.splitlines():
                parts = line.split()
                if len(parts) >= 5 and (int(parts[3]) != 3 or parts[4] not in ("undefined", "0")):
                    out.append({"job": parts[0], "batch": f"{parts[1]}.{parts[2]}", "status": int(parts[3]),
                                "exit": parts[5] if len(parts) > 5 else None})
        return out


def write_config(world_dir: Path, mongo_url: str, web: FakeCMSWeb, proxy: FaultProxy, pool: CondorPool,
                 rest_port: int, sites: dict[str, str]) -> Path:
    pw = world_dir / "rucio-pw"
    pw.write_text(ROOT_PASS)
    pw.chmod(0o600)
    site_list = ",".join(SITES)
    env_expr = f'strcat("SITECONFIG_PATH={SITECONF_ROOT}/", DESIRED_Sites)'
    site_tables = "".join(f'[jobs.sites.{rse}]\nsite = "{site}"\n' for rse, site in sites.items())
    text = f"""
[service]
state_dir = "{world_dir / 'state'}"
interval_s = 4
parallel_rses = 4
dry_run = false
lease_ttl_s = 20
log_level = "INFO"
instance = "e2e"

[planner]
rse_expression = "{EXPRESSION}"
files_per_job = 25

[guards]
max_delete_fraction = 1.0

[conmon]
url = "{web.conmon_url}"
format = "raw"
connect_timeout_s = 2
read_timeout_s = 3
retries = 1
backoff_s = 0.1

[wmstats]
url = "{web.wmstats_url}"
timeout_s = 3
retries = 1
backoff_s = 0.1

[rucio]
host = "{proxy.url}"
auth_host = "{proxy.url}"
account = "root"
auth_type = "userpass"
username = "{ROOT_USER}"
password_file = "{pw}"
timeout_s = 4

[mongo]
url = "{mongo_url}"
database = "{DB}"

[jobs]
backend = "condor"
retries = 1
deadline_h = 2
max_consecutive_denied = 5

[condor]
pool = "{pool.pool}"
token_dir = "{pool.token_dir('submitter')}"
requirements = 'stringListMember(MY.DESIRED_Sites, "{site_list}")'
ping_timeout_s = 10
hold_max_s = 3600

[condor.extra_attributes]
Environment = '{env_expr}'

[rest]
host = "127.0.0.1"
port = {rest_port}
cache_ttl_s = 0

{site_tables}"""
    path = world_dir / "msunmerged.toml"
    path.write_text(text)
    return path



@contextmanager
def running_world(condor_pool: CondorPool, rucio_server: RucioServer) -> Iterator[World]:
    """The world with no RSE yet, in this session's server folder; everything of it stopped afterwards."""
    directory = server_dir("e2e")
    for sub in ("state", "out"):
        shutil.rmtree(directory / sub, ignore_errors=True)
    shutil.rmtree(condor_pool.inside("/srv/e2e"), ignore_errors=True)
    mongo = MongoServer(directory, "secantusdb-e2e").start()
    proxy = FaultProxy(int(rucio_server.url.rsplit(":", 1)[1]))
    web = FakeCMSWeb().start()
    world = World(condor_pool, web, mongo, rucio_server, proxy, directory, directory / "msunmerged.toml")
    ACTIVE[:] = [world]
    try:
        yield world
    finally:
        ACTIVE.clear()
        web.stop()
        proxy.close()
        mongo.stop()
        try:  # leave nothing of ours in the shared pool's queue
            condor_pool.run("condor_rm", "-constraint", 'regexp("^T2_XE_", MSUnmergedJobId)')
        except subprocess.SubprocessError:
            pass


def configure(world: World) -> Path:
    """(Re)write the service configuration for every RSE known so far."""
    return write_config(world.dir, world.mongo.url, world.web, world.proxy, world.pool,
                        world.rest_port, {r: lay.site for r, lay in world.rses.items()})


def diagnose() -> str:
    """The running world's RSE documents and condor jobs, for a failure message."""
    if not ACTIVE:
        return ""
    w = ACTIVE[0]
    lines = ["", "--- RSE documents:"]
    try:
        for doc in w.db().rses.find({}, {"state": 1, "reason": 1, "detail": 1, "generation": 1}):
            lines.append(str(doc))
        for doc in w.db().jobs.find({"state": {"$nin": ["finished"]}}, {"state": 1, "reason": 1}):
            lines.append(str(doc))
        lines.append("--- condor:")
        lines.append(w.condor("condor_q", "-allusers", "-constraint", 'regexp("^T2_XE_", MSUnmergedJobId)', "-af",
                              "MSUnmergedJobId", "JobStatus", "HoldReason", check=False))
    except Exception as exc:  # noqa: BLE001
        lines.append(f"(diagnosis failed: {exc})")
    return "\n".join(lines)
