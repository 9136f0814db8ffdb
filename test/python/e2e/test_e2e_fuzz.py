"""Bad input corpus: hypothesis fuzzing of the dump reader + planner, the site-config parsers, the job-report
parser and the REST parameters, for a bounded time; and a replay of every input that once crashed something.

A crash is an uncaught exception other than the documented error types:
  dump + planner      none escapes: an unreadable dump is the guard `dump_unreadable` (DumpError inside)
  site-local-config   worker.siteconf.SiteConfigError
  storage.json        worker.siteconf.SiteConfigError
  job report          none: bad lines go to Report.problems
  REST parameters     answers 400 (BadParam) / 403 / 404 / 429 / 503, never 500, always JSON under data/

Inputs that crashed are written to test/.servers/e2e/fuzz-crashes/<target>/ while fuzzing; the minimal ones
are kept under corpus/<target>/ and replayed by test_corpus_replays (see corpus/README.md).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from MSUnmerged import planner
from MSUnmerged.collector import Collector, MemorySink, parse_report
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks
from MSUnmerged.jobs.backend import JobState, JobStatus
from MSUnmerged.worker import siteconf, storage
from servers import built_dir

pytestmark = [pytest.mark.slow]

CORPUS = Path(__file__).resolve().parent / "corpus"
CRASHES = built_dir("e2e") / "fuzz-crashes"
FUZZ = settings(max_examples=int(os.environ.get("E2E_FUZZ_EXAMPLES", "400")), deadline=None,
                database=None, suppress_health_check=list(HealthCheck))
TRIED: dict[str, int] = {}
PROTECTED = ["/store/unmerged/Era/Prim/AOD/proc-v1", "/store/unmerged/Era/Prim/AOD/proc-v2/000/380"]


def _keep_crash(target: str, data: bytes) -> None:
    folder = CRASHES / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{hashlib.sha256(data).hexdigest()[:16]}.bin").write_bytes(data)


def guarded(target: str, fn: Callable[[bytes], None]) -> Callable[[bytes], None]:
    def run(data: bytes) -> None:
        TRIED[target] = TRIED.get(target, 0) + 1
        try:
            fn(data)
        except Exception:
            _keep_crash(target, data)
            raise
    return run


# ----- targets: each takes bytes, raises only on a crash ------------------------------------------------

def _tmp(tmp_root: Path, data: bytes, name: str) -> Path:
    d = tmp_root / hashlib.sha256(data).hexdigest()[:16]
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    path.write_bytes(data)
    return path


def target_dump(data: bytes, tmp_root: Path) -> None:
    config = Config()
    config.guards.max_delete_fraction = 1.0
    out = tmp_root / ("plan-" + hashlib.sha256(data).hexdigest()[:16])
    plan = planner.plan("T2_XE_FUZZ", iter_chunks(io.BytesIO(data), chunk_bytes=4096, read_ahead=0), PROTECTED,
                        config, out, stats=None, require_scan=False)
    if plan.guard:
        assert plan.files_to_delete == 0 and not plan.job_files, plan
        return
    protection = planner.check_protection(PROTECTED, None, 0.5)
    for name in plan.job_files:
        for line in (out / "jobs" / name).read_bytes().splitlines():
            assert line.startswith(b"/store/unmerged/"), line
            assert not protection.covers(line), f"protected file planned for deletion: {line!r}"


def target_siteconf(data: bytes, tmp_root: Path) -> None:
    path = _tmp(tmp_root, data, "site-local-config.xml")
    try:
        cfg = siteconf.parse(str(path))
    except siteconf.SiteConfigError:
        return
    for m in cfg.methods:
        m.describe()


def target_storage(data: bytes, tmp_root: Path) -> None:
    path = _tmp(tmp_root, data, "storage.json")
    try:
        entries = storage.load_storage_json(str(path))
        sites = [(e.get("site"), e.get("volume")) for e in entries if isinstance(e, dict)]
        for site, volume in sites[:5]:
            catalog = storage.catalog_for(entries, site, volume, str(path))
            if catalog is None:
                continue
            for proto in list(catalog.rules)[:3]:
                pfn = catalog.pfn(proto, "/store/unmerged/Era/Prim/AOD/proc-v1/000/f.root")
                assert pfn is None or isinstance(pfn, str)
    except siteconf.SiteConfigError:
        return


def target_report(data: bytes, tmp_root: Path) -> None:
    path = _tmp(tmp_root, data, "report.jsonl")
    report = parse_report(path)
    sink = MemorySink()
    lfns = [f.lfn for f in report.files][:3]
    Collector(sink).collect("T2_XE_FUZZ:1.000:1-000001", lfns or None, report,
                            JobStatus("T2_XE_FUZZ:1.000:1-000001", JobState.FINISHED, "1.0@x"))


TARGETS: dict[str, Callable[[bytes, Path], None]] = {
    "dump": target_dump, "siteconf": target_siteconf, "storage": target_storage, "report": target_report}


# ----- strategies -----------------------------------------------------------------------------------------

COMPONENTS = st.sampled_from(["store", "unmerged", "Era", "Prim", "AOD", "proc-v1", "proc-v2", "proc-v10", "000",
                              "380", "f.root", "", ".", "..", " ", "\t", "é", "\x00", "logs", "prod", "a" * 300])


@st.composite
def dump_bytes(draw: Any) -> bytes:
    lines = draw(st.lists(st.lists(COMPONENTS, min_size=1, max_size=9).map(lambda c: "/" + "/".join(c)),
                          max_size=40))
    kind = draw(st.sampled_from(["text", "crlf", "json", "gzip", "gzip-cut", "raw", "mixed"]))
    text = "\n".join(lines).encode("utf-8", "surrogatepass") if kind != "crlf" else "\r\n".join(lines).encode()
    if kind == "json":
        return json.dumps(lines).encode()
    if kind == "gzip":
        return gzip.compress(text)
    if kind == "gzip-cut":
        blob = gzip.compress(text)
        return blob[:draw(st.integers(0, len(blob)))]
    if kind == "raw":
        return draw(st.binary(max_size=400))
    if kind == "mixed":
        return text + draw(st.binary(max_size=50)) + b"\n" + text
    return text


XML_PIECES = st.sampled_from([
    "<site-local-config>", "</site-local-config>", '<site name="T2_XE_A">', "<site>", "</site>", "<stage-out>",
    "</stage-out>", '<method volume="V" protocol="posix" command="cp"/>', "<method/>", '<method command=""/>',
    "<local-stage-out>", "</local-stage-out>", '<command value="gfal2"/>', '<catalog url="trivialcatalog_file:/x"/>',
    "<fallback-stage-out>", "</fallback-stage-out>", '<lfn-prefix value="root://x"/>', '<subsite name="S"/>',
    "<!--", "-->", "&amp;", "&bogus;", "<![CDATA[", "]]>", "\x00", "é", '<?xml version="1.0"?>'])


@st.composite
def xml_bytes(draw: Any) -> bytes:
    if draw(st.booleans()):
        return "".join(draw(st.lists(XML_PIECES, max_size=25))).encode("utf-8", "surrogatepass")
    return draw(st.binary(max_size=300))


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True) |
    st.sampled_from(["site", "volume", "rse", "protocols", "protocol", "prefix", "rules", "lfn", "pfn", "chain",
                     "posix", "T2_XE_A", "V", "/(.*)", "/x/$1", "(", "$9", "/store/(.*)", "(a+)+$", ""]),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
        st.sampled_from(["site", "volume", "rse", "protocols", "protocol", "prefix", "rules", "lfn", "pfn",
                         "chain", "access", "type"]), kids, max_size=6),
    max_leaves=30)


@st.composite
def storage_bytes(draw: Any) -> bytes:
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(st.binary(max_size=200))
    entry = draw(st.fixed_dictionaries({"site": st.just("T2_XE_A") | JSONISH, "volume": st.just("V") | JSONISH},
                                       optional={"rse": JSONISH, "protocols": JSONISH | st.lists(
                                           st.fixed_dictionaries({"protocol": st.just("posix") | JSONISH},
                                                                 optional={"prefix": JSONISH, "rules": JSONISH,
                                                                           "access": JSONISH}), max_size=3)}))
    doc = [entry] if choice < 3 else draw(JSONISH)
    return json.dumps(doc).encode()


REPORT_LINES = st.one_of(
    st.fixed_dictionaries({"lfn": st.text(max_size=20) | JSONISH, "pfn": JSONISH, "error": JSONISH,
                           "outcome": st.sampled_from(["deleted", "missing", "dry_run", "permission_denied",
                                                       "timeout", "storage_error", "refused", "not_attempted",
                                                       "bogus"]) | JSONISH,
                           "attempts": st.integers(-2, 5) | JSONISH}),
    st.fixed_dictionaries({"dir": JSONISH, "pfn": JSONISH, "outcome": JSONISH, "error": JSONISH}),
    st.fixed_dictionaries({"start": JSONISH}),
    st.fixed_dictionaries({"summary": JSONISH, "exit_code": JSONISH}),
    JSONISH,
).map(lambda rec: json.dumps(rec))


@st.composite
def report_bytes(draw: Any) -> bytes:
    lines = draw(st.lists(REPORT_LINES, max_size=12))
    blob = "\n".join(lines).encode() + (b"\n" if draw(st.booleans()) else b"")
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(blob)))
        blob = blob[:cut] + draw(st.binary(max_size=8))
    return blob


# ----- the fuzz tests -------------------------------------------------------------------------------------

@FUZZ
@given(data=dump_bytes())
def test_fuzz_dump_reader_and_planner(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    guarded("dump", lambda d: target_dump(d, tmp_path_factory.getbasetemp() / "fuzz-dump"))(data)


@FUZZ
@given(data=xml_bytes())
def test_fuzz_site_local_config(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    guarded("siteconf", lambda d: target_siteconf(d, tmp_path_factory.getbasetemp() / "fuzz-siteconf"))(data)


@FUZZ
@given(data=storage_bytes())
def test_fuzz_storage_json(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    guarded("storage", lambda d: target_storage(d, tmp_path_factory.getbasetemp() / "fuzz-storage"))(data)


@FUZZ
@given(data=report_bytes())
def test_fuzz_job_report(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    guarded("report", lambda d: target_report(d, tmp_path_factory.getbasetemp() / "fuzz-report"))(data)


PARAM_NAMES = st.sampled_from(["rse", "state", "error_class", "dir", "job", "after", "stream", "limit", "detail",
                               "cycles", "probe", "mode", "x", "rse[]", ""])
PARAM_VALUES = st.one_of(st.text(max_size=30), st.sampled_from(
    ["ALL_DOCS", "T2_XE_A", "true", "false", "1", "0", "-1", "99999999999999999999", "deleted", "failed",
     "/store/unmerged/", "/store/unmerged/x", "%00", "\x00", "a" * 5000, "live", "ready", "plan", "apply"]))
ENDPOINTS = st.sampled_from(["data/status", "data/info", "data/files", "data/jobs", "data/cycles", "data/plan",
                             "data/health", "data/triggers", "rse", "", "metrics", "data/nosuch"])


def rest_request(base: str, endpoint: str, params: list[tuple[str, str]], method: str = "GET",
                 headers: dict[str, str] | None = None) -> tuple[int, bytes, str]:
    query = urllib.parse.urlencode([(k, v.encode("utf-8", "surrogatepass")) for k, v in params])
    url = f"{base}/{endpoint}" + (f"?{query}" if query else "")
    req = urllib.request.Request(url, method=method, headers=headers or {},
                                 data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "")


def check_rest_answer(endpoint: str, status: int, body: bytes, ctype: str) -> None:
    assert status != 500 and status < 500 or status == 503, (endpoint, status, body[:300])
    if endpoint.startswith("data/") and endpoint != "data/nosuch" and "json" in ctype:
        json.loads(body)


@pytest.mark.integration
@FUZZ
@given(endpoint=ENDPOINTS, params=st.lists(st.tuples(PARAM_NAMES, PARAM_VALUES), max_size=5),
       post=st.booleans(), headers=st.dictionaries(st.sampled_from(
           ["cms-auth-status", "cms-authn-login", "cms-authn-hmac", "cms-authz-admin", "Content-Type"]),
           st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20), max_size=4))
def test_fuzz_rest_parameters(rest_app: Any, endpoint: str, params: list[tuple[str, str]], post: bool,
                              headers: dict[str, str]) -> None:
    TRIED["rest"] = TRIED.get("rest", 0) + 1
    method = "POST" if post and endpoint in ("data/triggers", "data/trigger") else "GET"
    if post and endpoint == "data/triggers":
        endpoint = "data/trigger"
    status, body, ctype = rest_request(rest_app.url, endpoint, params, method, headers)
    if status == 500:
        _keep_crash("rest", json.dumps({"endpoint": endpoint, "params": params, "method": method,
                                        "headers": headers}).encode())
    check_rest_answer(endpoint, status, body, ctype)


# ----- the corpus -----------------------------------------------------------------------------------------

def corpus_cases() -> list[Any]:
    cases = []
    for target in sorted(TARGETS) + ["rest"]:
        for path in sorted((CORPUS / target).glob("*")) if (CORPUS / target).is_dir() else []:
            cases.append(pytest.param(target, path, id=f"{target}/{path.name}"))
    return cases


@pytest.mark.parametrize("target,path", corpus_cases())
def test_corpus_replays(target: str, path: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Every input that once crashed something is handled now."""
    data = path.read_bytes()
    if target == "rest":
        app = request.getfixturevalue("rest_app")
        case = json.loads(data)
        status, body, ctype = rest_request(app.url, case["endpoint"], [tuple(p) for p in case["params"]],
                                           case.get("method", "GET"), case.get("headers") or {})
        check_rest_answer(case["endpoint"], status, body, ctype)
        return
    TARGETS[target](data, tmp_path)


def test_fuzz_figures() -> None:
    """Writes how many inputs each fuzz target tried in this session (for the issue note)."""
    out = built_dir("e2e")
    (out / "fuzz-figures.json").write_text(json.dumps(TRIED, sort_keys=True))
