"""The worker's own WebDAV client (worker/webdav.py) against real WebDAV servers: WsgiDAV, and xrootd's XrdHttp.
The real worker (Cleanup) in this process; the attacker acts right after the PROPFIND of a batch."""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest

from MSUnmerged.collector import parse_report
from MSUnmerged.worker import choose
from MSUnmerged.worker.cleanup import Cleanup
from MSUnmerged.worker.manifest import parse_manifest
from MSUnmerged.worker.report import ReportWriter
from MSUnmerged.worker.webdav import WebDavDeleter
from servers.webdav import WebDavServer
from sites_kit import CERN
from worker_kit import (AttackAfterLook, into_directory, VOLUME, files, make_site, manifest, run_worker, summary,
                        world_dir)

pytestmark = pytest.mark.integration


class Attacked(AttackAfterLook, WebDavDeleter):
    """The WebDAV client; `attack` runs once its look at a batch of files is done, before any DELETE."""


class Site:
    """A dataset of four files on a WebDAV server, and a site whose stage-out method is WebDAV (command gfal2)."""

    def __init__(self, server: WebDavServer, top: Path) -> None:
        self.server = server
        self.base = f"/store/unmerged/Run2026A/Prim{uuid.uuid4().hex[:8]}/AOD/v1/000/380"
        self.lfns = [f"{self.base}/f{i}.root" for i in range(4)]
        for lfn in self.lfns:
            self.put(lfn)
        self.sc = make_site(top, [{"protocol": "WebDAV", "access": "global-rw", "prefix": server.url}],
                            [{"volume": VOLUME, "protocol": "WebDAV"}])

    def at(self, lfn: str) -> Path:
        return self.server.data / lfn.lstrip("/")

    def put(self, lfn: str, content: bytes = b"x") -> Path:
        path = self.at(lfn)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.utime(path, (0, 0))  # long before the scan
        return path

    def run(self, tmp_path: Path, attack: Callable[[], None] = lambda: None, env: Optional[dict[str, str]] = None,
            **step: object) -> tuple[dict[str, tuple[str, str]], dict]:
        """(outcome, reason) per file of a job over the dataset, and the report's start line."""
        Attacked.attack = staticmethod(attack)  # type: ignore[assignment]
        path = tmp_path / f"report-{uuid.uuid4().hex[:6]}.jsonl"
        writer = ReportWriter.open(str(path))
        Cleanup(parse_manifest(manifest(self.lfns, **step)), writer,
                dict(os.environ, SITECONFIG_PATH=str(self.sc), **(env or {}))).run()
        writer.close()
        report = parse_report(path)
        return {f.lfn: (f.outcome, f.reason or "") for f in report.files}, report.start


@pytest.fixture()
def attacked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(choose.COMMANDS, "gfal2", [Attacked])


@pytest.fixture()
def site(wsgidav_server: WebDavServer, attacked: None) -> Iterator[Site]:
    top = world_dir("msunmerged-webdav-")
    yield Site(wsgidav_server, top)
    shutil.rmtree(top, ignore_errors=True)


def _probes(server: WebDavServer) -> list[str]:
    return [p.name for p in (server.data / "store" / "unmerged").iterdir() if "probe" in p.name]


def test_wsgidav_files_go_with_a_conditional_delete(site: Site, tmp_path: Path) -> None:
    out, start = site.run(tmp_path)
    assert set(out.values()) == {("deleted", "")}
    assert not any(site.at(x).exists() for x in site.lfns)
    assert start["method"]["deleter"] == "webdav" and "If-Match" in start["method"]["checks"]
    assert not _probes(site.server)  # the probe collection is removed after


def test_a_file_replaced_by_a_directory_after_the_propfind_loses_nothing_inside(site: Site, tmp_path: Path) -> None:
    """The issue's race: the planned file becomes a collection holding inner/precious.root right after the look.
    The DELETE carries If-Match (the file's ETag) and Depth: 0: WsgiDAV refuses it, nothing inside goes."""
    victim = site.at(site.lfns[0])

    out, _ = site.run(tmp_path, into_directory(victim))
    assert out[site.lfns[0]] == ("refused", "modified_since_scan")
    assert (victim / "inner" / "precious.root").read_bytes() == b"precious"
    assert [out[x] for x in site.lfns[1:]] == [("deleted", "")] * 3  # control


def test_a_file_rewritten_after_the_propfind_stays(site: Site, tmp_path: Path) -> None:
    victim = site.at(site.lfns[1])
    out, _ = site.run(tmp_path, lambda: site.put(site.lfns[1], b"new content"))
    assert out[site.lfns[1]] == ("refused", "modified_since_scan")
    assert victim.read_bytes() == b"new content"
    assert [out[x] for x in site.lfns if x != site.lfns[1]] == [("deleted", "")] * 3


def test_a_dry_run_looks_and_writes_nothing(site: Site, tmp_path: Path) -> None:
    out, _ = site.run(tmp_path, dry_run=True)
    assert set(out.values()) == {("dry_run", "")}
    assert all(site.at(x).exists() for x in site.lfns) and not _probes(site.server)


def test_a_server_ignoring_the_condition_is_found_by_the_probe(careless_wsgidav_server: WebDavServer, attacked: None,
                                                              tmp_path: Path) -> None:
    """A server that gives ETags but ignores If-Match and Depth: the job's probe finds it before any DELETE of a
    planned file, every file is refused unconditional_delete, nothing of the site's is deleted, the probe is gone.
    The race that would otherwise take a directory's content is armed and never reached (no DELETE, no look)."""
    top = world_dir("msunmerged-careless-")
    try:
        site = Site(careless_wsgidav_server, top)
        victim = site.at(site.lfns[0])

        out, _ = site.run(tmp_path, into_directory(victim))
        assert set(out.values()) == {("refused", "unconditional_delete")}
        assert all(site.at(x).is_file() for x in site.lfns)  # the probe came first: no file was even looked at
        assert not _probes(careless_wsgidav_server)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_over_tls_with_the_jobs_token(token_wsgidav_server: WebDavServer, attacked: None, tmp_path: Path) -> None:
    """davs:// with the site's CAs (X509_CERT_DIR) and the job's bearer token; a wrong token is auth_failed,
    nothing deleted."""
    top = world_dir("msunmerged-davs-")
    try:
        site = Site(token_wsgidav_server, top)
        env = {"X509_CERT_DIR": str(token_wsgidav_server.ca_dir), "MSUNMERGED_CREDENTIAL": "token"}
        out, _ = site.run(tmp_path, env=dict(env, BEARER_TOKEN="not-" + (token_wsgidav_server.token or "")))
        assert {o for o, _ in out.values()} == {"auth_failed"} and all(site.at(x).exists() for x in site.lfns)
        out, start = site.run(tmp_path, env=dict(env, BEARER_TOKEN=token_wsgidav_server.token or ""))
        assert set(out.values()) == {("deleted", "")} and not any(site.at(x).exists() for x in site.lfns)
        assert start["method"]["unmerged_pfn"].startswith("davs://127.0.0.1:")
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_xrdhttp_gives_no_etag_so_nothing_is_deleted(xrdhttp_server: tuple, attacked: None, tmp_path: Path) -> None:
    """xrootd's HTTP door (5.5) gives no ETag and ignores If-Match: WebDAV deletion through it is refused."""
    xrootd, server = xrdhttp_server
    top = world_dir("msunmerged-xrdhttp-")
    try:
        site = Site(server, top)
        for lfn in site.lfns:
            xrootd.put(lfn)
        out, _ = site.run(tmp_path)
        assert set(out.values()) == {("refused", "unconditional_delete")}
        assert all(site.at(x).exists() for x in site.lfns)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_cern_as_published_is_cleaned_through_the_volume_rucio_names(wsgidav_server: WebDavServer,
                                                                    tmp_path: Path) -> None:
    """cms-sw/siteconf's T2_CH_CERN, unchanged but for its WebDAV door (eoscms.cern.ch:443) pointed at the local
    WsgiDAV: the real worker deletes through the CERN_EOS volume's WebDAV protocol and records it. A Rucio PFN the
    volume does not name is mapping_disagrees, as every CERN job was before: nothing deleted."""
    top = world_dir("msunmerged-cern-")
    try:
        sc = CERN.build(top / "SITECONF")
        published = (sc / "storage.json").read_text()
        assert "davs://eoscms.cern.ch:443/eos/cms" in published
        (sc / "storage.json").write_text(published.replace("davs://eoscms.cern.ch:443", wsgidav_server.url))
        rucio = wsgidav_server.url + "/eos/cms/store/unmerged/"
        base = f"/store/unmerged/Run2026A/Cern{uuid.uuid4().hex[:8]}/AOD/v1/000"
        lfns = [f"{base}/f{i}.root" for i in range(3)]
        paths = []
        for lfn in lfns:
            path = wsgidav_server.data / "eos" / "cms" / lfn.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x")
            os.utime(path, (0, 0))
            paths.append(path)

        def job(pfn: str) -> dict:
            man = manifest(lfns, unmerged_pfn=pfn, mapping_check="rucio")
            man["rse"] = man["site"] = "T2_CH_CERN"
            return man
        rc, lines = run_worker(tmp_path / "other", job(wsgidav_server.url + "/eos/cms/store/"), sc)
        assert rc == 3 and {x["reason"] for x in files(lines).values()} == {"mapping_disagrees"}
        assert all(p.exists() for p in paths)
        rc, lines = run_worker(tmp_path / "job", job(rucio), sc)
        assert rc == 0, summary(lines)
        method = lines[0]["start"]["method"]
        assert (method["kind"], method["volume"], method["protocol"], method["deleter"]) == (
            "volume", "CERN_EOS", "WebDAV", "webdav")
        assert method["choice"]["rule"] == "rucio_volume" and method["unmerged_pfn"] == rucio
        assert {x["outcome"] for x in files(lines).values()} == {"deleted"}
        assert not any(p.exists() for p in paths)
    finally:
        shutil.rmtree(top, ignore_errors=True)
