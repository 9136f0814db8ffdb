"""End-to-end harness: every real server at once on 127.0.0.1, and the service run as its own process.

One session fixture, `e2e_world`, starts
  - a SecantusDB (MongoDB wire protocol) server of its own, so a test can stop and restart it;
  - the real Rucio server (shared `rucio_server` fixture) behind a small fault proxy (503, hang, garbage),
    with CMS-like RSEs (attribute country=XE) that the service's RSE expression selects;
  - the real HTCondor pool (shared `condor_pool` fixture) playing two sites, T2_XE_Alpha and T2_XE_Beta:
    each has its own site-local-config.xml and storage.json under /srv/e2e/siteconf/<site> inside the
    pool's chroot, and posix storage under /srv/e2e/storage/<RSE>. Jobs of both sites run on the pool's
    slot; the job attribute `Environment` (a ClassAd expression on DESIRED_Sites) points each job's
    SITECONFIG_PATH at its own site, as the glidein of that site would;
  - FakeCMSWeb (ConMon stats and dumps, WMStats protected list) serving dumps generated here.

The service runs as `e2e_service.py` in a subprocess (build_service from the configuration: live sources,
ledger, routing backend over CondorBackend), in serve mode (Service.serve plus the REST app) or driving
run_once for one RSE with a pause at a step (for SIGKILL).

Every file of every scenario RSE is known in advance with its expected fate (see `Layout`), and
`check_rse` compares storage, ledger and REST with it file by file.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest
from pymongo import MongoClient

from MSUnmerged.ledger import Ledger
from MSUnmerged.samplesite import AGE_S
from servers import REPO, Process, free_port, server_dir, wait_port
from servers.condor import JOB_UID, CondorPool
from servers.http_fakes import FakeCMSWeb
from servers.mongo import _secantusd
from servers.rucio import ROOT_PASS, ROOT_USER, RucioServer, add_cms_rse

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "e2e_service.py"
SITES = ("T2_XE_Alpha", "T2_XE_Beta")
SITECONF_ROOT = "/srv/e2e/siteconf"  # inside the pool's chroot
STORAGE_ROOT = "/srv/e2e/storage"
EXPRESSION = "country=XE&cms_type=real&rse_type=DISK"
DB = "msunmerged_e2e"
# Files' expected fates.
DELETE, PROTECT, EXCLUDE, ABSENT, DENY, STALE = "delete", "protect", "exclude", "absent", "deny", "stale"


# ----- the world ------------------------------------------------------------------------------------------

class MongoServer:
    """A SecantusDB server of the harness's own: stop() and start() again on the same port and data."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        shutil.rmtree(directory / "db", ignore_errors=True)
        self.port = free_port()
        self.proc: Optional[Process] = None

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self) -> None:
        self.proc = Process("secantusdb-e2e", [_secantusd(), "--host", "127.0.0.1", "--port", str(self.port),
                                               "--storage-path", str(self.directory / "db"), "--standalone",
                                               "--log-level", "WARNING"], self.directory)
        wait_port(self.port, timeout=60, proc=self.proc)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None


class FaultProxy:
    """A TCP proxy in front of the Rucio server: mode 'pass', '503', 'hang' or 'garbage'."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.mode = "pass"
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="rucio-proxy").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        mode = self.mode
        try:
            if mode == "hang":
                self._held.append(conn)
                return
            if mode in ("503", "garbage"):
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                except OSError:
                    pass
                body = b"fault 503" if mode == "503" else b"\x00\xff{not json at all\x8b"
                status = b"503 Service Unavailable" if mode == "503" else b"200 OK"
                conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
                conn.close()
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=30)
            pipes = [threading.Thread(target=_pipe, args=(a, b), daemon=True)
                     for a, b in ((conn, upstream), (upstream, conn))]
            for p in pipes:
                p.start()
        except OSError:
            conn.close()

    def release(self) -> None:
        for s in self._held:
            s.close()
        self._held.clear()

    def close(self) -> None:
        self._stop.set()
        self.release()
        self.server.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@dataclass
class Layout:
    """One RSE's files: LFN -> expected fate, the protected bases, and which LFNs ConMon lists."""

    rse: str
    site: str
    fates: dict[str, str] = field(default_factory=dict)
    protected: list[str] = field(default_factory=list)
    dump: list[str] = field(default_factory=list)
    end_time: float = 0.0


def make_layout(rse: str, site: str, tag: str, datasets: int = 6, files: int = 20, absent: int = 3) -> Layout:
    """Datasets of `files` files under run-number directories; dataset 0 protected at its base, dataset 1
    one run-number level deep (the rest of it deletable), one log area (excluded), `absent` dump lines not
    on storage. Deterministic: the same arguments give the same LFNs."""
    lay = Layout(rse, site)
    for d in range(datasets):
        base = f"/store/unmerged/Run2024{tag}/Prim{d}/AOD/PromptReco-v{d + 1}"
        deep = f"{base}/000/380/001"
        if d == 0:
            lay.protected.append(base)
        if d == 1:
            lay.protected.append(deep)
        for k in range(files):
            lfn = f"{base}/000/380/{k % 3:03d}/f{k:04d}.root"
            fate = PROTECT if d == 0 or (d == 1 and lfn.startswith(deep + "/")) else DELETE
            lay.fates[lfn] = fate
    for k in range(4):
        lay.fates[f"/store/unmerged/logs/prod/2024/11/WMAgent/{tag}/log{k}.tar.gz"] = EXCLUDE
    for k in range(absent):
        lay.fates[f"/store/unmerged/Run2024{tag}/Prim9/AOD/PromptReco-v9/000/380/000/gone{k}.root"] = ABSENT
    lay.dump = sorted(lay.fates)
    return lay


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
        """ConMon serves this dump with a finished scan ending at end_time (default now)."""
        lay.end_time = time.time() - 5 if end_time is None else end_time
        if dump is not None:
            lay.dump = dump
        self.web.add_rse(lay.rse, list(lay.dump), end_time=lay.end_time)
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
        for rec in Ledger(db).file_records(rse, gen):
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
        """Queue and history ads of this harness's jobs (MSUnmergedJobId starting with rse_prefix)."""
        constraint = f'regexp("^{rse_prefix}", MSUnmergedJobId)'
        out = []
        for cmd in (["condor_q", "-allusers"], ["condor_history"]):
            text = self.condor(*cmd, "-constraint", constraint, "-af", "MSUnmergedJobId", "ClusterId",
                               "ProcId", "JobStatus", "ExitCode")
            for line in text.splitlines():
                parts = line.split()
                if len(parts) >= 4:
                    out.append({"job": parts[0], "batch": f"{parts[1]}.{parts[2]}", "status": int(parts[3]),
                                "exit": parts[4] if len(parts) > 4 else None})
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


@pytest.fixture(scope="session")
def e2e_world(condor_pool: CondorPool, rucio_server: RucioServer) -> Iterator[World]:
    directory = server_dir("e2e")
    for sub in ("state", "out"):
        shutil.rmtree(directory / sub, ignore_errors=True)
    shutil.rmtree(condor_pool.inside("/srv/e2e"), ignore_errors=True)
    mongo = MongoServer(directory)
    mongo.start()
    proxy = FaultProxy(int(rucio_server.url.rsplit(":", 1)[1]))
    web = FakeCMSWeb().start()
    world = World(condor_pool, web, mongo, rucio_server, proxy, directory, directory / "msunmerged.toml")
    world.rest_port = free_port()  # type: ignore[attr-defined]
    _WORLD[:] = [world]
    try:
        yield world
    finally:
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
                        world.rest_port, {r: lay.site for r, lay in world.rses.items()})  # type: ignore[attr-defined]


# ----- the service process ------------------------------------------------------------------------------

class ServiceProcess:
    """`e2e_service.py` in its own session; stdout/stderr to a log under the world's out/ folder."""

    def __init__(self, world: World, name: str, *args: str, env: Optional[dict[str, str]] = None) -> None:
        out = world.dir / "out"
        out.mkdir(exist_ok=True)
        self.name = name
        self.log = out / f"{name}.log"
        self.marks = out / f"{name}.marks"
        self.marks.mkdir(exist_ok=True)
        full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src" / "python"), str(HERE)]),
                    "E2E_MARKS": str(self.marks), **(env or {})}
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen([sys.executable, str(DRIVER), str(world.config_path), *args],
                                          stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                          start_new_session=True)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_mark(self, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (self.marks / name).exists():
                return
            if not self.alive():
                raise AssertionError(f"{self.name} exited ({self.popen.returncode}) before mark {name}:\n"
                                     f"{self.tail()}")
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: no mark {name} after {timeout} s:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL, the whole process group (the service and any child it has)."""
        if self.alive():
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def stop(self) -> None:
        if self.alive():
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def wait_until(what: str, cond: Callable[[], Any], timeout: float, every: float = 1.0,
               proc: Optional[ServiceProcess] = None) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as exc:  # noqa: BLE001 - a database briefly away, say
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if proc is not None and not proc.alive():
            raise AssertionError(f"service died while waiting for {what}:\n{proc.tail()}")
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}"
                         + (f"\n{proc.tail()}" if proc else "") + _diagnose())


_WORLD: list["World"] = []


def _diagnose() -> str:
    """RSE documents and our condor jobs, for a failure message."""
    if not _WORLD:
        return ""
    w = _WORLD[0]
    lines = ["", "--- RSE documents:"]
    try:
        for doc in w.db().rses.find({}, {"state": 1, "reason": 1, "detail": 1, "generation": 1}):
            lines.append(str(doc))
        for doc in w.db().jobs.find({"state": {"$nin": ["collected"]}}, {"state": 1, "reason": 1}):
            lines.append(str(doc))
        lines.append("--- condor:")
        lines.append(w.condor("condor_q", "-allusers", "-constraint", 'regexp("^T2_XE_", MSUnmergedJobId)', "-af",
                              "MSUnmergedJobId", "JobStatus", "HoldReason", check=False))
    except Exception as exc:  # noqa: BLE001
        lines.append(f"(diagnosis failed: {exc})")
    return "\n".join(lines)


SETTLED = ("clean", "done_with_errors", "skipped", "guarded")


def settled(world: World, rses: list[str], states: tuple[str, ...] = SETTLED) -> Callable[[], bool]:
    def check() -> bool:
        return all(world.rse_doc(r).get("state") in states and world.rse_doc(r).get("generation") is not None
                   or world.rse_doc(r).get("reason") in ("scan_stale",) for r in rses)
    return check


def rest_get(world: World, path: str, timeout: float = 10) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{world.rest_port}/ms-unmerged/{path}"  # type: ignore[attr-defined]
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body


def rest_files(world: World, rse: str) -> dict[str, dict[str, Any]]:
    status, body = rest_get(world, f"data/files?rse={rse}&stream=true")
    assert status == 200, body
    return {r["lfn"]: r for r in body["result"]}


# ----- file-by-file checks ------------------------------------------------------------------------------

@dataclass
class Tally:
    checked: int = 0
    by_fate: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)  # a file that should exist and does not
    unexplained: list[str] = field(default_factory=list)  # deletable, still there, no reason recorded


def check_rse(world: World, lay: Layout, tally: Tally, use_rest: bool = True,
              deny_ok: bool = False) -> dict[str, str]:
    """Storage, ledger and REST against the expected fates; returns LFN -> ledger state (or '')."""
    ledger = world.files(lay.rse)
    rest = rest_files(world, lay.rse) if use_rest else ledger
    states = {}
    for lfn, fate in lay.fates.items():
        exists = world.storage(lay.rse, lfn).exists()
        rec = ledger.get(lfn)
        state = rec["state"] if rec else ""
        states[lfn] = state
        tally.checked += 1
        tally.by_fate[fate] = tally.by_fate.get(fate, 0) + 1
        if use_rest:
            assert (rest.get(lfn) or {}).get("state", "") == state, (lfn, rest.get(lfn), state)
        if fate in (PROTECT, EXCLUDE, STALE):
            if not exists:
                tally.lost.append(f"{lay.rse}:{lfn}")
            assert state in ("", "skipped_protected"), (lay.rse, lfn, fate, rec)
        elif fate == ABSENT:
            assert not exists, (lfn, rec)
            if lfn in lay.dump and ledger:  # found missing, or not tried (e.g. the storage refused the others) with a reason
                assert state == "missing" or (state in ("failed", "unknown") and rec.get("error_class")), (lfn, rec)
        elif fate == DELETE:
            assert not exists, (lay.rse, lfn, rec)
            assert state in ("deleted", "missing"), (lay.rse, lfn, rec)
        elif fate == DENY:
            if exists:
                if not (rec and rec.get("state") in ("failed", "unknown") and (rec.get("error_class")
                                                                               or rec.get("error"))):
                    tally.unexplained.append(f"{lay.rse}:{lfn}")
            else:
                assert state in ("deleted", "missing"), (lfn, rec)
    return states


def deletions_per_lfn(world: World, rse_prefix: str = "T2_XE_") -> dict[str, int]:
    """How many worker reports acted on each (RSE, generation, LFN) (outcome deleted or missing):
    more than one means two jobs went for the same file of the same dump."""
    counts: dict[str, int] = {}
    reports = world.dir / "state" / "reports"
    if not reports.exists():
        return counts
    for path in reports.rglob("*.jsonl"):
        rse = path.parent.name
        if not rse.startswith(rse_prefix):
            continue
        m = re.search(r"_(\d+\.\d+)_[^_]+\.jsonl$", path.name)
        gen = m.group(1) if m else path.name
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("outcome") in ("deleted", "missing") and "lfn" in rec:
                key = f"{rse}|{gen}|{rec['lfn']}"
                counts[key] = counts.get(key, 0) + 1
    return counts


def files_in_two_live_jobs(world: World) -> list[str]:
    """LFNs whose ledger record points at a job while another job document also lists it."""
    db = world.db()
    seen = Counter((d["rse"], d["gen"], d["lfn"]) for d in Ledger(db).file_records())
    return [str(k) for k, n in seen.items() if n > 1]
