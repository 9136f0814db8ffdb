"""ConMon and WMStats over HTTPS with an X.509 client certificate or an RFC 3820 proxy, as CMSWEB asks for
them: a local HTTPS server (the wmcore samples) that requires client certificates of a test CA."""
from __future__ import annotations

import ssl
from pathlib import Path
from typing import Iterator

import pytest

from MSUnmerged.config import AuthConfig, ConMonConfig, WMStatsConfig
from MSUnmerged.sources.conmon import ConMonClient
from MSUnmerged.sources.errors import AUTHENTICATION, SourceError
from MSUnmerged.sources.wmstats import WMStatsClient
from servers.http_fakes import FakeCMSWeb
from servers.testca import Issued, TestCA

pytestmark = pytest.mark.integration
ROBOT = "msunmerged robot"


class Pki:
    def __init__(self, folder: Path) -> None:
        self.ca = TestCA(folder)
        self.server = self.ca.issue("cmsweb test", server=True)
        self.robot = self.ca.issue(ROBOT)
        self.expired = self.ca.issue("expired robot", expired=True)
        self.proxy = self.ca.proxy(self.robot)
        self.stranger = TestCA(folder / "other", "Other CA").issue("stranger")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def web(wmcore_fixtures: Path, pki: Pki) -> Iterator[FakeCMSWeb]:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pki.server.cert, pki.server.key)
    tls.load_verify_locations(pki.ca.ca_file)
    tls.verify_mode = ssl.CERT_REQUIRED
    tls.verify_flags |= ssl.VERIFY_ALLOW_PROXY_CERTS  # as CMSWEB's front end accepts grid proxies
    with FakeCMSWeb.from_fixtures(wmcore_fixtures, tls=tls) as server:
        yield server


def auth_with(pki: Pki, cert: Issued | None = None, proxy: Path | None = None) -> AuthConfig:
    return AuthConfig(cert=str(cert.cert) if cert else "", key=str(cert.key) if cert else "",
                      proxy=str(proxy or ""), ca_path=str(pki.ca.ca_file))


def clients(web: FakeCMSWeb, auth: AuthConfig) -> tuple[ConMonClient, WMStatsClient]:
    conmon = ConMonClient(ConMonConfig(url=web.conmon_url, connect_timeout_s=2, read_timeout_s=5, retries=0,
                                       backoff_s=0.01), auth)
    wmstats = WMStatsClient(WMStatsConfig(url=web.wmstats_url, timeout_s=5, retries=0, backoff_s=0.01), auth)
    return conmon, wmstats


def test_client_certificate(web: FakeCMSWeb, pki: Pki, conmon_stats: dict, protected_lfns: list[str]) -> None:
    conmon, wmstats = clients(web, auth_with(pki, pki.robot))
    assert conmon.stats("T2_US_Wisconsin") == conmon_stats["T2_US_Wisconsin"]
    assert set(protected_lfns) <= set(wmstats.protected_lfns())
    assert web.peers and set(web.peers) == {ROBOT}


def test_rfc_proxy(web: FakeCMSWeb, pki: Pki, conmon_stats: dict) -> None:
    conmon, _ = clients(web, auth_with(pki, proxy=pki.proxy))
    assert conmon.stats("T2_US_Wisconsin") == conmon_stats["T2_US_Wisconsin"]
    assert web.peers[-1].isdigit()  # the proxy's own CN (a serial number) below the robot's subject


@pytest.mark.parametrize("case,message", [
    ("expired", "expired at"),  # found before connecting
    ("missing", "No such file"),  # configured, but not (yet) mounted
    ("wrong_ca", ""),  # the server refuses a certificate it cannot verify
    ("none", ""),  # no certificate at all: the server requires one
])
def test_refused_certificates_are_authentication_errors(web: FakeCMSWeb, pki: Pki, tmp_path: Path, case: str,
                                                        message: str) -> None:
    auth = {"expired": auth_with(pki, pki.expired), "wrong_ca": auth_with(pki, pki.stranger),
            "missing": auth_with(pki, proxy=tmp_path / "x509up_u1000"), "none": auth_with(pki)}[case]
    conmon, wmstats = clients(web, auth)
    for call in (lambda: conmon.stats(), wmstats.protected_lfns):
        with pytest.raises(SourceError) as err:
            call()
        assert err.value.kind == AUTHENTICATION, err.value
        assert message in err.value.message
        assert err.value.source in ("conmon", "wmstats")
    assert web.peers == []


def test_untrusted_server_is_an_authentication_error(web: FakeCMSWeb, pki: Pki) -> None:
    auth = auth_with(pki, pki.robot)
    auth.ca_path = str(TestCA(pki.ca.folder / "third", "Third CA").ca_file)
    conmon, _ = clients(web, auth)
    with pytest.raises(SourceError) as err:
        conmon.stats()
    assert err.value.kind == AUTHENTICATION and "CERTIFICATE_VERIFY_FAILED" in err.value.message
