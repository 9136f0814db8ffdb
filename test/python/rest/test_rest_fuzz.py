"""Every endpoint's parameters fuzzed over real HTTP (hypothesis): malformed values, repeated and unknown
parameters, bytes that are not UTF-8, bodies that are not JSON objects. An answer is never a 5xx while the
ledger database is up, and a 400 names the parameter. Before: a malformed cursor
(`data/files?rse=R&after=zz`) was a 500 with a traceback.
"""
from __future__ import annotations

import json
import time
import urllib.parse
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rest_kit import seed_rse
from test_rest_api import operator_headers
from test_rest_hardening import JSON, request

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RSE = "T2_RT_Fuzz"
DUMP = [f"/store/unmerged/Run3/Fz{i % 3}/RAW/v1/f{i:05d}.root" for i in range(120)] + \
    [f"/store/unmerged/Run3/Kept/RAW/v1/f{i:05d}.root" for i in range(20)]
PROTECTED = ["/store/unmerged/Run3/Kept/RAW/v1"]
# Each endpoint's parameters; for each, values that mean something to it (the fuzzer adds any text).
ENDPOINTS: dict[str, dict[str, list[str]]] = {
    "data/health": {"probe": ["live", "ready"]},
    "data/status": {"detail": ["true", "False", "1"], "rse_type": ["t1", "t2t3"], "cycles": ["0", "5", "100"]},
    "data/info": {"rse": [RSE, "ALL_DOCS", "all_docs"], "detail": ["true", "false"]},
    "data/files": {"rse": [RSE], "state": ["failed", "planned", "submitted", "deleted"], "error_class": ["timeout"],
                   "dir": ["/store/unmerged/Run3/"], "job": [f"{RSE}:1:1-1"], "limit": ["1", "10000"],
                   "after": [f"{RSE}|x|/store/unmerged/", "zz"], "stream": ["true", "false"]},
    "data/dirs": {"rse": [RSE], "state": ["removed", "refused"], "error_class": ["symlink_in_path"],
                  "dir": ["/store/unmerged/"], "job": ["j"], "limit": ["5"], "after": ["zz"], "stream": ["true"]},
    "data/jobs": {"rse": [RSE], "state": ["running", "finished"], "limit": ["1", "100"]},
    "data/cycles": {"limit": ["1", "1000"]},
    "data/plan": {"rse": [RSE], "limit": ["0", "10"]},
    "data/triggers": {},
    "rse": {"name": [RSE, "T2_Unknown"]},
    "": {},
    "metrics": {},
}
# Text of every kind: control characters, surrogates-free unicode, long values, numbers, JSON-ish.
TEXT = st.one_of(st.text(max_size=40), st.text(st.characters(max_codepoint=0x7f), max_size=300),
                 st.integers().map(str), st.floats(allow_nan=True).map(str),
                 st.sampled_from(["", " ", "\n", "-1", "0x10", "1e999", "null", "[]", "{}", "%", "%ff", "\x00",
                                  "a" * 5000, "/store/unmerged/" + "x/" * 600, "true\n", "ALL_DOCS\r"]))
# Raw query-string pieces that are not percent-encodings of text: bytes that are not UTF-8, stray '%'.
RAW = st.sampled_from(["%ff%fe", "%", "%zz", "%00", "%c3%28", "a=b=c", "&&", "=x", "%e2%82"])


# Values that are wrong for most parameters, each tried on every parameter with the others valid.
HOSTILE = ["", "zz", " ", "\n", "-1", "1e999", "NaN", "0x1f", "\x00", "%", "é", "a" * 5000, "true\n", "9" * 5000,
           "-" + "1" * 4400, "1e99999999", "1" + "0" * 400,
           f"{RSE}|1.000|", f"{RSE}|x|/store/unmerged/", "|||", "/store/unmerged/../x", "[]", "{}"]


@st.composite
def queries(draw: Any, endpoint: str) -> str:
    """A query string: each known parameter present or not, with a meaningful value mostly (so that a
    wrong one is reached past the others), else any text; sometimes repeated, unknown ones, raw bytes."""
    known = ENDPOINTS[endpoint]
    pairs = []
    for name in sorted(known):
        for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2]))):
            pairs.append((name, draw(st.one_of(*[st.sampled_from(known[name])] * 3, TEXT))))
    pairs += [(draw(TEXT), draw(TEXT)) for _ in range(draw(st.integers(0, 1)))]
    query = urllib.parse.urlencode(draw(st.permutations(pairs)))
    return "&".join(filter(None, [query, *draw(st.lists(RAW, max_size=2))]))


@pytest.fixture(scope="module")
def fuzzed(rest_app: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    seed_rse(rest_app.db, RSE, tmp_path_factory.mktemp("plans"), DUMP, PROTECTED, time.time() - 3600, done_jobs=1,
             outcome=lambda i, lfn: {"state": "failed", "error_class": "timeout", "error": "slow"} if i % 2 else
             {"state": "deleted", "size": 5})
    return rest_app


def check(status: int, body: Any, what: str) -> None:
    assert status < 500, (what, status, body if isinstance(body, dict) else str(body)[:500])
    if status == 400 and isinstance(body, dict):
        assert "parameter '" in body["error"] or "body" in body["error"], (what, body)


FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_no_parameter_makes_a_5xx(fuzzed: Any, endpoint: str) -> None:
    @FUZZ
    @given(query=queries(endpoint))
    def one(query: str) -> None:
        path = f"{endpoint}?{query}" if query else endpoint
        status, body = request(fuzzed, "GET", path, {})
        check(status, body, path)

    one()


@pytest.mark.parametrize("endpoint, name", [(e, n) for e, params in sorted(ENDPOINTS.items()) for n in sorted(params)])
def test_each_parameter_with_hostile_values(fuzzed: Any, endpoint: str, name: str) -> None:
    """Every parameter of every endpoint with each HOSTILE value, beside every other parameter valid, and
    beside the RSE alone (other valid parameters can keep a bad one from mattering)."""
    others = [(n, values[0]) for n, values in ENDPOINTS[endpoint].items() if n != name]
    for value in HOSTILE:
        for beside in (others, [(n, v) for n, v in others if n in ("rse", "name")]):
            path = f"{endpoint}?{urllib.parse.urlencode([*beside, (name, value)])}"
            status, body = request(fuzzed, "GET", path, {})
            check(status, body, path)


def test_a_malformed_cursor_is_400(fuzzed: Any) -> None:
    """Before: 500 and a traceback."""
    status, body = request(fuzzed, "GET", f"data/files?rse={RSE}&after=zz", {})
    assert status == 400 and "parameter 'after'" in body["error"], body


def nested(opener: bytes, closer: bytes, inner: bytes = b"") -> st.SearchStrategy[bytes]:
    """`opener` n times, `inner`, `closer` n times: JSON nested n deep (up to ~30,000, within rest.max_body_bytes)."""
    return st.integers(1, 30_000).map(lambda n: opener * n + inner + closer * n)


# Bodies nested deep (Python's JSON parser raises RecursionError past ~1,000 levels) and numbers with more
# digits than Python converts (ValueError past 4,300) or than a float holds.
DEEP_OR_HUGE = st.one_of(nested(b"[", b"]"), nested(b'{"a":', b"}", b"1"), nested(b'{"rse":[', b"]}"),
                         st.integers(1, 60_000).map(lambda n: b'{"rse": ' + b"9" * n + b"}"),
                         st.integers(1, 60_000).map(lambda n: b"-" + b"1" * n),
                         st.integers(300, 100_000).map(lambda n: b'{"request_id": 1e%d}' % n))
BODY = st.one_of(st.binary(max_size=200), TEXT.map(str.encode), DEEP_OR_HUGE,
                 st.dictionaries(TEXT, TEXT | st.integers() | st.none() | st.lists(TEXT, max_size=2),
                                 max_size=4).map(lambda d: json.dumps(d).encode()),
                 st.fixed_dictionaries({"rse": st.sampled_from([RSE]) | TEXT, "mode": st.sampled_from(["plan"]) | TEXT,
                                        "request_id": st.just("") | TEXT}).map(lambda d: json.dumps(d).encode()))


@pytest.mark.parametrize("body", [b"[" * 3000 + b"]" * 3000, b'{"rse":' * 3000 + b"1" + b"}" * 3000,
                                  b'{"rse": ' + b"9" * 5000 + b"}", b'{"rse": "x", "request_id": 1e999}'],
                         ids=["array-3000-deep", "object-3000-deep", "5000-digits", "infinite-float"])
def test_deep_or_huge_bodies_are_400(fuzzed: Any, body: bytes) -> None:
    """Before: a body nested 3,000 levels deep was a 500 (RecursionError, rest/params.py caught only
    ValueError)."""
    app = fuzzed.mount(f"/ms-unmerged-deep-{uuid.uuid4().hex[:6]}", trigger_rate_per_min=1000, refusals_per_min=1000)
    headers = {**JSON, **operator_headers(fuzzed.key.read_bytes(), "fuzzer")}
    status, answer = request(app, "POST", "data/trigger", headers, body)
    assert status == 400 and answer["error"].startswith("parameter 'body'"), answer


def test_no_trigger_body_or_query_makes_a_5xx(fuzzed: Any) -> None:
    """An operator's trigger with any body and query: parsed after the headers let the operator in."""
    app = fuzzed.mount("/ms-unmerged-fuzz", trigger_rate_per_min=1000, refusals_per_min=1000)
    headers = {**JSON, **operator_headers(fuzzed.key.read_bytes(), "fuzzer")}

    @FUZZ
    @given(body=BODY, query=queries("data/info"))
    def one(body: bytes, query: str) -> None:
        status, answer = request(app, "POST", f"data/trigger?{query}", headers, body)
        check(status, answer, f"{query} {body[:100]!r}")

    one()
    assert request(app, "POST", "data/trigger", headers,
                   json.dumps({"rse": RSE, "request_id": uuid.uuid4().hex}).encode())[0] == 202  # still works
