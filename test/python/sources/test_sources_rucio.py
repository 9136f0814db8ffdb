"""The Rucio client against a real Rucio 41 server on 127.0.0.1 (see servers/rucio.py)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from MSUnmerged.config import AuthConfig, RucioConfig
from MSUnmerged.sources.errors import SourceError
from MSUnmerged.sources.rucio import RucioSource, rse_info, site_from_rse
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
    info = src.rse_info("T2_US_NEBRASKA")
    assert (info.site, info.rse_type, info.tier) == ("T2_US_Nebraska", "DISK", 2)
    assert info.attributes["country"] == "US" and info.attributes["cms_type"] == "real"
    derived = src.rse_info("T2_US_WISCONSIN")
    assert derived.site == "T2_US_WISCONSIN" and derived.tier == 2
    assert src.rse_info("T1_US_FNAL_TAPE").rse_type == "TAPE"
    with pytest.raises(SourceError) as err:
        src.rse_info("T2_XX_NOWHERE")
    assert err.value.kind == "no_match"


def test_lfns2pfns_delete(rucio: RucioServer, tmp_path: Path) -> None:
    lfns = ["/store/unmerged/Run2024F/Muon0/AOD/PromptReco-v1/000/383/123/A.root",
            "/store/unmerged/Run2024F/Muon0/AOD/PromptReco-v1/000/383/123"]
    pfns = source(rucio, tmp_path).lfns2pfns("T2_US_NEBRASKA", lfns, operation="delete")
    assert set(pfns) == set(lfns)
    for lfn, pfn in pfns.items():
        # identity lfn2pfn of a generic server: <proto prefix>/<scope>/<name>
        assert pfn.startswith("root://xrootd.example.org:1094/store/test/rucio/") and pfn.endswith(lfn)
    assert source(rucio, tmp_path).lfns2pfns("T2_US_NEBRASKA", []) == {}


def test_lfns2pfns_without_protocol(rucio: RucioServer, tmp_path: Path) -> None:
    rucio.admin_client().add_rse("T2_US_NOPROTO")
    with pytest.raises(SourceError) as err:
        source(rucio, tmp_path).lfns2pfns("T2_US_NOPROTO", ["/store/unmerged/a/b.root"])
    assert err.value.kind in ("no_match", "http_status")


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


def test_unreachable(tmp_path: Path) -> None:
    from servers import free_port

    url = f"http://127.0.0.1:{free_port()}"
    (tmp_path / "pw").write_text("x")
    src = RucioSource(RucioConfig(host=url, auth_host=url, account="root", auth_type="userpass", username="u",
                                  password_file=str(tmp_path / "pw"), timeout_s=2), AuthConfig(), tmp_path)
    with pytest.raises(SourceError) as err:
        src.rses("tier=1")
    assert err.value.kind == "unreachable"


@pytest.mark.parametrize("name, attrs, site, tier, rse_type", [
    ("T1_US_FNAL_Disk", {}, "T1_US_FNAL", 1, "DISK"),
    ("T1_UK_RAL_Tape", {}, "T1_UK_RAL", 1, "TAPE"),
    ("T2_UK_London_Brunel", {}, "T2_UK_London_Brunel", 2, "DISK"),
    ("T2_CH_CERN", {"site": "T2_CH_CERN_P5", "tier": "2"}, "T2_CH_CERN_P5", 2, "DISK"),
])
def test_site_from_attributes_or_name(name: str, attrs: dict, site: str, tier: int, rse_type: str) -> None:
    info = rse_info(name, attrs)
    assert (info.site, info.tier, info.rse_type) == (site, tier, rse_type)
    assert site_from_rse("not_a_cms_rse") is None


def test_unmerged_pfn_for_deletion(rucio: RucioServer, tmp_path: Path) -> None:
    src = source(rucio, tmp_path)
    pfn = src.unmerged_pfn("T2_US_NEBRASKA")
    assert pfn == src.lfns2pfns("T2_US_NEBRASKA", ["/store/unmerged/"], operation="delete")["/store/unmerged/"]
    assert pfn.startswith("root://xrootd.example.org:1094/store/test/rucio/") and pfn.endswith("/store/unmerged/")
    rucio.admin_client().add_rse("T2_US_NOPROTO2")
    for rse in ("T2_XX_NOWHERE", "T2_US_NOPROTO2"):  # unknown RSE; an RSE without a protocol
        with pytest.raises(SourceError) as err:
            src.unmerged_pfn(rse)
        assert err.value.source == "rucio" and err.value.kind in ("no_match", "http_status")
