"""The Rucio client against a real Rucio 41 server on 127.0.0.1 (see servers/rucio.py)."""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from MSUnmerged.config import AuthConfig, JobsConfig, RucioConfig, SiteConfig
from MSUnmerged.ledger import LedgerError
from MSUnmerged.sites import resolve_site, site_from_rse
from MSUnmerged.sources.errors import SourceError
from MSUnmerged.sources.rucio import RucioSource
from servers.rucio import ROOT_PASS, RucioServer, add_cms_rse

# RSE -> (site attribute or None, tier, rse_type, cms_type)
RSES = {
    "T1_US_FNAL_DISK": ("T1_US_FNAL", 1, "DISK", "real"),
    "T1_US_FNAL_TAPE": ("T1_US_FNAL", 1, "TAPE", "real"),
    "T2_US_NEBRASKA": ("T2_US_Nebraska", 2, "DISK", "real"),
    "T2_US_WISCONSIN": (None, 2, "DISK", "real"),  # no site attribute: derived from the name
    "T2_CH_CERN": ("T2_CH_CERN", 2, "DISK", "real"),
    "T2_US_TESTBED": ("T2_US_Testbed", 2, "DISK", "test"),
}


@pytest.fixture(scope="module")
def rucio(rucio_server: RucioServer) -> RucioServer:
    admin = rucio_server.admin_client()
    for name, (site, tier, rse_type, cms_type) in RSES.items():
        add_cms_rse(admin, name, site=site, tier=tier, rse_type=rse_type, cms_type=cms_type,
                    country="CH" if "_CH_" in name else "US")
    return rucio_server


def source(server: RucioServer, tmp_path: Path, **kw: Any) -> RucioSource:
    return server.source(tmp_path, **kw)


pytestmark = pytest.mark.integration


@pytest.mark.parametrize("expression, want", [
    ("cms_type=real&rse_type=DISK", ["T1_US_FNAL_DISK", "T2_CH_CERN", "T2_US_NEBRASKA", "T2_US_WISCONSIN"]),
    ("cms_type=real&rse_type=DISK&tier=1", ["T1_US_FNAL_DISK"]),
    ("cms_type=real&rse_type=DISK&tier=2", ["T2_CH_CERN", "T2_US_NEBRASKA", "T2_US_WISCONSIN"]),
    ("cms_type=real&rse_type=DISK&tier=2&country=US", ["T2_US_NEBRASKA", "T2_US_WISCONSIN"]),
    ("cms_type=real&rse_type=DISK\\T2_CH_CERN", ["T1_US_FNAL_DISK", "T2_US_NEBRASKA", "T2_US_WISCONSIN"]),
    ("rse_type=TAPE|cms_type=test", ["T1_US_FNAL_TAPE", "T2_US_TESTBED"]),
])
def test_partition_expressions(rucio: RucioServer, tmp_path: Path, expression: str, want: list[str]) -> None:
    # The server is shared by the session: other suites' RSEs may match too; judge ours.
    assert [r for r in source(rucio, tmp_path).rses(expression) if r in RSES] == want


def test_expression_matching_nothing(rucio: RucioServer, tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        source(rucio, tmp_path).rses("cms_type=real&rse_type=DISK&tier=3")
    assert (err.value.kind, err.value.source) == ("no_match", "rucio")


def test_invalid_expression(rucio: RucioServer, tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        source(rucio, tmp_path).rses("tier=(2")
    assert err.value.kind == "http_status"


def test_rse_attributes(rucio: RucioServer, tmp_path: Path) -> None:
    src = source(rucio, tmp_path)
    attrs = src.rse_attributes("T2_US_NEBRASKA")
    assert (attrs["site"], attrs["tier"], attrs["country"], attrs["cms_type"]) == ("T2_US_Nebraska", "2", "US", "real")
    assert "site" not in src.rse_attributes("T2_US_WISCONSIN")
    with pytest.raises(SourceError) as err:
        src.rse_attributes("T2_XX_NOWHERE")
    assert err.value.kind == "no_match"


def test_site_from_the_rucio_attribute_where_configured(rucio: RucioServer, tmp_path: Path) -> None:
    """jobs.site_attribute names the attribute; jobs.sites.<RSE>.site wins over it; the name is the last resort."""
    src = source(rucio, tmp_path)
    admin = rucio.admin_client()
    add_cms_rse(admin, "T2_US_RENAMED_DISK", site="T2_US_Moved", country="US")
    admin.add_rse_attribute("T2_US_RENAMED_DISK", "cms_site", "T2_US_Elsewhere")
    jobs = JobsConfig()
    assert resolve_site(jobs, "T2_US_RENAMED_DISK", src) == "T2_US_RENAMED"  # not configured: the name only
    jobs.site_attribute = "site"
    assert resolve_site(jobs, "T2_US_RENAMED_DISK", src) == "T2_US_Moved"
    jobs.site_attribute = "cms_site"
    assert resolve_site(jobs, "T2_US_RENAMED_DISK", src) == "T2_US_Elsewhere"
    assert resolve_site(jobs, "T2_US_WISCONSIN", src) == "T2_US_WISCONSIN"  # no such attribute: the name
    jobs.sites["T2_US_RENAMED_DISK"] = SiteConfig(site="T2_US_Operator")
    assert resolve_site(jobs, "T2_US_RENAMED_DISK", src) == "T2_US_Operator"
    admin.add_rse("NOT_CMS_LIKE")
    with pytest.raises(LedgerError) as err:
        resolve_site(jobs, "NOT_CMS_LIKE", src)
    assert err.value.reason == "no_site" and "jobs.sites.NOT_CMS_LIKE.site" in err.value.detail
    with pytest.raises(SourceError):  # Rucio cannot say: no guess
        resolve_site(jobs, "T2_XX_NOWHERE", src)


def test_wrong_password(rucio: RucioServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src = source(rucio, tmp_path)
    (tmp_path / "pw").write_text("not-the-password-x9\n")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(SourceError) as err:
        src.rses("tier=2")
    assert err.value.kind == "authentication"
    assert "not-the-password-x9" not in caplog.text and "not-the-password-x9" not in str(err.value)


def test_bearer_token_from_file(rucio: RucioServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    admin = rucio.admin_client()
    token = admin.auth_token  # a real server-issued token, handed over as a token file
    (tmp_path / "token").write_text(token + "\n")
    caplog.set_level(logging.DEBUG)
    src = RucioSource(RucioConfig(host=rucio.url, auth_host=rucio.url, account="root", auth_type="token"),
                      AuthConfig(token_file=str(tmp_path / "token")), tmp_path / "state")
    assert src.rses("cms_type=real&rse_type=DISK&tier=1") == ["T1_US_FNAL_DISK"]
    assert token not in caplog.text
    (tmp_path / "token").write_text("garbage-token-value\n")  # renewed on disk: picked up, refused
    with pytest.raises(SourceError) as err:
        src.rses("tier=1")
    assert err.value.kind == "authentication"
    assert "garbage-token-value" not in caplog.text


def test_generated_rucio_cfg_holds_no_secret(rucio: RucioServer, tmp_path: Path) -> None:
    src = source(rucio, tmp_path)
    src.rses("tier=1")
    cfg = (tmp_path / "state" / "rucio" / "rucio.cfg").read_text()
    assert rucio.url in cfg and ROOT_PASS not in cfg
    assert (tmp_path / "state" / "rucio" / "auth_token").stat().st_mode & 0o077 == 0


def test_clients_sharing_a_state_folder_write_its_config_at_once(tmp_path: Path) -> None:
    """Services sharing a state folder (one process per RSE, the trigger worker) each write rucio.cfg on their
    first call: none may fail because another's write took its temporary file (a real e2e failure)."""
    sources = [RucioSource(RucioConfig(host="http://127.0.0.1:9", auth_host="http://127.0.0.1:9"), AuthConfig(),
                           tmp_path / "state") for _ in range(8)]
    start = threading.Barrier(len(sources))
    failures: list[BaseException] = []

    def write(src: RucioSource) -> None:
        start.wait()
        for _ in range(200):
            try:
                src._write_config("userpass")
            except OSError as err:
                failures.append(err)
                return
    threads = [threading.Thread(target=write, args=(src,)) for src in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)  # bounds a hang
    assert failures == []
    assert "auth_type = userpass" in (tmp_path / "state" / "rucio" / "rucio.cfg").read_text()
    assert sorted(p.name for p in (tmp_path / "state" / "rucio").iterdir()) == ["rucio.cfg"]  # no temporary left


def test_unreachable(tmp_path: Path) -> None:
    from servers import free_port

    url = f"http://127.0.0.1:{free_port()}"
    (tmp_path / "pw").write_text("x")
    src = RucioSource(RucioConfig(host=url, auth_host=url, account="root", auth_type="userpass", username="u",
                                  password_file=str(tmp_path / "pw"), timeout_s=2), AuthConfig(), tmp_path)
    with pytest.raises(SourceError) as err:
        src.rses("tier=1")
    assert err.value.kind == "unreachable"


@pytest.mark.parametrize("name, site", [
    ("T1_US_FNAL_Disk", "T1_US_FNAL"),
    ("T1_UK_RAL_Tape", "T1_UK_RAL"),
    ("T2_UK_London_Brunel", "T2_UK_London_Brunel"),
    ("not_a_cms_rse", None),
])
def test_site_from_name(name: str, site: str) -> None:
    assert site_from_rse(name) == site


def test_unmerged_pfn_for_deletion(rucio: RucioServer, tmp_path: Path) -> None:
    src = source(rucio, tmp_path)
    pfn = src.unmerged_pfn("T2_US_NEBRASKA")
    # identity lfn2pfn of a generic server: <protocol prefix>/<scope>/<name>
    assert pfn.startswith("root://xrootd.example.org:1094/store/test/rucio/") and pfn.endswith("/store/unmerged/")
    rucio.admin_client().add_rse("T2_US_NOPROTO2")
    for rse in ("T2_XX_NOWHERE", "T2_US_NOPROTO2"):  # unknown RSE; an RSE without a protocol
        with pytest.raises(SourceError) as err:
            src.unmerged_pfn(rse)
        assert err.value.source == "rucio" and err.value.kind in ("no_match", "http_status")
