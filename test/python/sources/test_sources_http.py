"""ConMon and WMStats clients against a real local HTTP server serving the wmcore samples."""
from __future__ import annotations

import gzip
import logging
from pathlib import Path
from typing import Iterator

import pytest


from MSUnmerged.config import AuthConfig, ConMonConfig, WMStatsConfig
from MSUnmerged.dumpreader import DumpError, iter_chunks
from MSUnmerged.guards import GUARD_PROTECTED_EMPTY, GuardTripped
from MSUnmerged.sample import SampleSpec
from MSUnmerged.sources.conmon import ConMonClient
from MSUnmerged.sources.errors import SourceError
from MSUnmerged.sources.wmstats import WMStatsClient
from servers.http_fakes import FIXTURE_RSE, FakeCMSWeb

pytestmark = pytest.mark.integration
FAST = dict(connect_timeout_s=2.0, read_timeout_s=2.0, retries=2, backoff_s=0.01)


@pytest.fixture
def web(wmcore_fixtures: Path) -> Iterator[FakeCMSWeb]:
    with FakeCMSWeb.from_fixtures(wmcore_fixtures) as server:
        yield server


def conmon(web: FakeCMSWeb, fmt: str = "raw", auth: AuthConfig | None = None, **kw: float) -> ConMonClient:
    return ConMonClient(ConMonConfig(url=web.conmon_url, format=fmt, **{**FAST, **kw}), auth or AuthConfig())


def wmstats(web: FakeCMSWeb, t0: bool = True, auth: AuthConfig | None = None) -> WMStatsClient:
    cfg = WMStatsConfig(url=web.wmstats_url, t0_url=web.t0_url if t0 else "", timeout_s=0.5, retries=1,
                        backoff_s=0.01)
    return WMStatsClient(cfg, auth or AuthConfig())


def dump_chunks(client: ConMonClient, rse: str, *filters: list[str]) -> Iterator[bytes]:
    """The dump as the service plans it: open_dump's stream through the dumpreader."""
    with client.open_dump(rse, *filters) as stream:
        yield from iter_chunks(stream)


def lines(chunks: Iterator[bytes]) -> list[str]:
    return b"".join(chunks).decode().splitlines()


# -- ConMon --------------------------------------------------------------------------------------

def test_stats_all_and_one(web: FakeCMSWeb, conmon_stats: dict) -> None:
    client = conmon(web)
    everything = client.stats()
    assert {k: v for k, v in everything.items() if k != FIXTURE_RSE} == conmon_stats
    assert client.stats("T2_US_Wisconsin") == conmon_stats["T2_US_Wisconsin"]
    assert client.stats("T2_XX_Nowhere") is None
    assert client.stats(FIXTURE_RSE)["files"] == 11938


@pytest.mark.parametrize("fmt", ["raw", "text", "json"])
def test_dump_every_format(web: FakeCMSWeb, fmt: str, conmon_dump_lfns: list[str]) -> None:
    assert lines(dump_chunks(conmon(web, fmt), FIXTURE_RSE)) == conmon_dump_lfns
    query = web.requests[-1][1]
    assert query == {"rse": FIXTURE_RSE, "format": fmt}


def test_raw_dump_stays_gzip_on_the_wire(web: FakeCMSWeb, conmon_dump_lfns: list[str]) -> None:
    with conmon(web, "raw").open_dump(FIXTURE_RSE) as stream:
        data = stream.read()
    assert data[:2] == b"\x1f\x8b"  # not decoded by requests: the dumpreader sees the gzip trailer
    assert gzip.decompress(data).decode().splitlines() == conmon_dump_lfns


def test_server_side_include_exclude(web: FakeCMSWeb, conmon_dump_lfns: list[str]) -> None:
    include = ["/store/unmerged/RunIIAutumn18FSPremix/", "/store/unmerged/Run2016G/"]
    first = next(x for x in conmon_dump_lfns if x.startswith(include[0]))
    exclude = ["/".join(first.split("/")[:5]) + "/"]  # one primary dataset of the included era
    got = lines(dump_chunks(conmon(web, "text"), FIXTURE_RSE, include, exclude))
    want = [x for x in conmon_dump_lfns if x.startswith(tuple(include)) and not x.startswith(tuple(exclude))]
    assert got == want and 0 < len(got) < len(conmon_dump_lfns)
    assert web.requests[-1][1]["include"] == ",".join(include)
    assert web.requests[-1][1]["exclude"] == exclude[0]


def test_retries_5xx_before_streaming(web: FakeCMSWeb, conmon_dump_lfns: list[str]) -> None:
    web.fault("files", status=503, times=2)
    assert lines(dump_chunks(conmon(web, "text"), FIXTURE_RSE)) == conmon_dump_lfns
    assert [r[0] for r in web.requests] == ["files"] * 3


def test_5xx_after_retries(web: FakeCMSWeb) -> None:
    web.fault("stats", status=500)
    with pytest.raises(SourceError) as err:
        conmon(web).stats()
    assert (err.value.kind, err.value.status, err.value.source) == ("http_status", 500, "conmon")
    assert len(web.requests) == 3  # first try + 2 retries


def test_4xx_is_not_retried(web: FakeCMSWeb) -> None:
    with pytest.raises(SourceError) as err:
        list(dump_chunks(conmon(web), "T2_XX_Nowhere"))
    assert (err.value.kind, err.value.status) == ("http_status", 404)
    assert len(web.requests) == 1


@pytest.mark.parametrize("endpoint, status, kind", [("stats", 401, "authentication"),
                                                     ("stats", 403, "authentication")])
def test_refused_credentials(web: FakeCMSWeb, endpoint: str, status: int, kind: str) -> None:
    web.fault(endpoint, status=status)
    with pytest.raises(SourceError) as err:
        conmon(web).stats()
    assert err.value.kind == kind and err.value.status == status


def test_slow_answer_times_out(web: FakeCMSWeb) -> None:
    web.fault("stats", delay_s=1.5)
    with pytest.raises(SourceError) as err:
        conmon(web, read_timeout_s=0.3, retries=1).stats()
    assert err.value.kind == "timeout"


def test_stall_mid_dump_times_out(web: FakeCMSWeb) -> None:
    web.add_generated_rse("T2_US_GEN", SampleSpec(files=20_000))  # many blocks: the stall is mid-body
    web.fault("files", stall_s=2.0)
    with pytest.raises(SourceError) as err:
        list(dump_chunks(conmon(web, "text", read_timeout_s=0.3), "T2_US_GEN"))
    assert err.value.kind == "timeout"


def test_unreachable() -> None:
    from servers import free_port

    client = ConMonClient(ConMonConfig(url=f"http://127.0.0.1:{free_port()}/x", **FAST), AuthConfig())
    with pytest.raises(SourceError) as err:
        client.stats()
    assert err.value.kind == "unreachable"


@pytest.mark.parametrize("fmt", ["raw", "text", "json"])
def test_dump_cut_in_the_middle_content_length(web: FakeCMSWeb, fmt: str) -> None:
    web.fault("files", cut_after=20_000)  # fixture dump: sent with Content-Length
    with pytest.raises(SourceError) as err:
        list(dump_chunks(conmon(web, fmt), FIXTURE_RSE))
    assert err.value.kind == "truncated"


@pytest.mark.parametrize("fmt", ["raw", "text", "json"])
def test_dump_cut_in_the_middle_chunked(web: FakeCMSWeb, fmt: str) -> None:
    web.add_generated_rse("T2_US_GEN", SampleSpec(files=20_000))  # generated: chunked, no length
    web.fault("files", cut_after=300_000)
    with pytest.raises(SourceError) as err:
        list(dump_chunks(conmon(web, fmt), "T2_US_GEN"))
    assert err.value.kind == "truncated"


def test_gzip_with_corrupt_tail(web: FakeCMSWeb) -> None:
    web.fault("files", corrupt_tail=True)  # the planner records it as guard dump_unreadable
    with pytest.raises(DumpError, match="gzip stream is truncated or corrupt"):
        list(dump_chunks(conmon(web, "raw"), FIXTURE_RSE))


@pytest.mark.parametrize("body", [b"<html><body>Single sign-on</body></html>", b'{"error": "no such RSE"}'])
def test_dump_that_is_not_a_dump(web: FakeCMSWeb, body: bytes) -> None:
    web.fault("files", body=body)
    with pytest.raises(SourceError) as err:
        list(dump_chunks(conmon(web, "text"), FIXTURE_RSE))
    assert err.value.kind == "bad_content"


def test_stats_not_an_object(web: FakeCMSWeb) -> None:
    web.fault("stats", body=b"[1, 2]")
    with pytest.raises(SourceError) as err:
        conmon(web).stats()
    assert err.value.kind == "bad_content"


def test_empty_dump_is_empty(web: FakeCMSWeb) -> None:
    web.add_rse("T2_US_EMPTY", [])
    for fmt in ("raw", "text", "json"):
        assert lines(dump_chunks(conmon(web, fmt), "T2_US_EMPTY")) == []


# -- WMStats -------------------------------------------------------------------------------------

def test_protected_union(web: FakeCMSWeb, protected_lfns: list[str]) -> None:
    web.t0_protected = ["/store/unmerged/Tier0Only/A/RAW/v1"] + protected_lfns[:3]
    got = wmstats(web).protected_lfns()
    assert got == sorted(set(protected_lfns) | {"/store/unmerged/Tier0Only/A/RAW/v1"})
    assert wmstats(web, t0=False).protected_lfns() == sorted(protected_lfns)


@pytest.mark.parametrize("endpoint", ["protectedlfns", "t0/protectedlfns"])
@pytest.mark.parametrize("fault, kind", [
    (dict(status=503), "http_status"),            # cache still empty after a restart
    (dict(status=500), "http_status"),
    (dict(delay_s=1.0), "timeout"),
    (dict(body=b'{"result": {"a": 1}}'), "bad_content"),
    (dict(body=b'["/store/unmerged/a"]'), "bad_content"),
    (dict(body=b'{"result": [1, 2]}'), "bad_content"),
    (dict(body=b'{"result": ["/store/unm'), "bad_content"),
])
def test_protected_never_partial(web: FakeCMSWeb, endpoint: str, fault: dict, kind: str) -> None:
    web.fault(endpoint, **fault)
    with pytest.raises(SourceError) as err:
        wmstats(web).protected_lfns()
    assert err.value.kind == kind
    assert err.value.source == ("wmstats-t0" if endpoint.startswith("t0") else "wmstats")


@pytest.mark.parametrize("endpoint", ["protectedlfns", "t0/protectedlfns"])
def test_an_empty_protected_list_is_its_guard(web: FakeCMSWeb, endpoint: str) -> None:
    """Either source answering [] (WMStats restarting) trips the guard docs/operations.md names, never a partial
    union of the other's list, and never reads as a malformed answer (wmstats_bad_content)."""
    web.fault(endpoint, body=b'{"result": []}')
    with pytest.raises(GuardTripped) as err:
        wmstats(web).protected_lfns()
    assert err.value.reason == GUARD_PROTECTED_EMPTY == "protected_list_empty"
    assert ("wmstats-t0 answered" if endpoint.startswith("t0") else "wmstats answered") in err.value.detail


def test_protected_retry_recovers_from_503(web: FakeCMSWeb, protected_lfns: list[str]) -> None:
    web.fault("protectedlfns", status=503, times=1)
    assert wmstats(web, t0=False).protected_lfns() == sorted(protected_lfns)


# -- authentication ------------------------------------------------------------------------------

def test_bearer_token_sent_and_never_logged(web: FakeCMSWeb, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    token = "eyJhbGciOiJFUzI1NiJ9.c2VjcmV0LXRva2VuLXZhbHVl.SIGNATURE-do-not-log"
    (tmp_path / "token").write_text(token + "\n")
    auth = AuthConfig(token_file=str(tmp_path / "token"))
    caplog.set_level(logging.DEBUG)
    conmon(web, auth=auth).stats()
    wmstats(web, auth=auth).protected_lfns()
    list(dump_chunks(conmon(web, "text", auth=auth), FIXTURE_RSE))
    web.fault("stats", status=503)
    with pytest.raises(SourceError) as err:
        conmon(web, auth=auth).stats()
    assert {r[2].get("Authorization") for r in web.requests} == {f"Bearer {token}"}
    assert "retry" in caplog.text  # the retries were logged...
    assert token not in caplog.text and "SIGNATURE" not in caplog.text  # ...without the token
    assert token not in str(err.value) and token not in repr(conmon(web, auth=auth).http.session.auth)


def test_missing_token_file_is_authentication(web: FakeCMSWeb, tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        conmon(web, auth=AuthConfig(token_file=str(tmp_path / "absent"))).stats()
    assert (err.value.kind, err.value.source) == ("authentication", "conmon")


def test_x509_and_ca_settings_reach_the_session(tmp_path: Path) -> None:
    from MSUnmerged.sources.http import make_session

    s = make_session(AuthConfig(cert="/c.pem", key="/k.pem", ca_path="/etc/grid-security/certificates"))
    assert s.cert == ("/c.pem", "/k.pem") and s.verify == "/etc/grid-security/certificates"
    assert make_session(AuthConfig(proxy="/tmp/x509up_u0", cert="/c.pem")).cert == "/tmp/x509up_u0"
    assert make_session(AuthConfig()).verify is True


def test_chunks_feed_the_dumpreader_directly(web: FakeCMSWeb, conmon_dump_lfns: list[str]) -> None:
    with conmon(web, "json").open_dump(FIXTURE_RSE) as stream:
        got = b"".join(iter_chunks(stream, chunk_bytes=64 * 1024))
    assert got.decode().splitlines() == conmon_dump_lfns
