"""Secrets in URLs taken out of failure details and logs: the one function, and the places that use it."""
from __future__ import annotations

import io
import logging

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from MSUnmerged import redact as redact_module
from MSUnmerged.redact import REDACTED, redact, redact_logs
from MSUnmerged.service.result import Failure, failure_of
from MSUnmerged.sources.errors import from_exception

from servers import free_port


@pytest.mark.parametrize("text, shown", [
    ("https://alice:pw@cmsweb.cern.ch/x", f"https://{REDACTED}@cmsweb.cern.ch/x"),
    ("mongodb://msunmerged:pw@db-0:27017,db-1/", f"mongodb://{REDACTED}@db-0:27017,db-1/"),
    ("GET https://h/files?rse=T2_A&format=raw&token=abc.def-ghi",
     f"GET https://h/files?rse=T2_A&format=raw&token={REDACTED}"),
    ("url: /files?access_token=xyz (Caused by ...)", f"url: /files?access_token={REDACTED} (Caused by ...)"),
    ("?password=p&Key=k;sig=s&X-Amz-Signature=S&X-Amz-Credential=C&authz=A#frag",
     f"?password={REDACTED}&Key={REDACTED};sig={REDACTED}&X-Amz-Signature={REDACTED}&X-Amz-Credential={REDACTED}"
     f"&authz={REDACTED}#frag"),
    ("davs://se.example:2880/store/unmerged/x.root?authz=MDAxY2xvY2F0aW9u",
     f"davs://se.example:2880/store/unmerged/x.root?authz={REDACTED}"),
    ("Authorization: Bearer eyJhbGciOi.JIUzI1.NiJ9", f"Authorization: Bearer {REDACTED}"),
    ("'https://h/x?client_secret=s'", f"'https://h/x?client_secret={REDACTED}'"),
])
def test_secrets_are_redacted(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize("text", [
    "/store/unmerged/Run3/A/RAW/v1/000/f.root", "conmon: http_status 404: GET stats: HTTP 404",
    "https://cmsweb.cern.ch/rucioconmon/unmerged/files?rse=T2_A&format=raw&include=/store/unmerged/",
    "cms_type=real&rse_type=DISK&tier=1", "user@cern.ch wrote", "",
])
def test_plain_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_a_real_transport_error_is_recorded_redacted() -> None:
    """requests names the URL in its error (without its scheme and host in "url: /path?query"): the
    source error, and the failure recorded from it, show no secret."""
    url = f"http://monitor:pw0rd@127.0.0.1:{free_port()}/unmerged/files?rse=T2_A&access_token=TOKEN42"
    with pytest.raises(requests.ConnectionError) as caught:
        requests.get(url, timeout=5)
    assert "TOKEN42" in str(caught.value)  # what would have been shown
    error = from_exception("conmon", caught.value, "GET files")
    failure = failure_of(error)
    for text in (error.message, str(error), failure.detail, failure.entry("T2_A")["detail"]):
        assert "TOKEN42" not in text and "pw0rd" not in text and REDACTED in text
    assert Failure("internal", "internal_error", "at https://u:secret@h/").detail == f"at https://{REDACTED}@h/"


def test_log_records_are_redacted() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    redact_logs(handler)
    redact_logs(handler)  # once is enough
    assert len(handler.filters) == 1
    log = logging.getLogger("test.redact")
    log.addHandler(handler)
    try:
        log.warning("fetching %s failed", "https://h/files?token=SECRET1")
        try:
            raise ValueError("bad answer from https://u:SECRET2@h/x")
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    text = out.getvalue()
    assert "SECRET" not in text and "token=<redacted> failed" in text
    assert "ValueError: bad answer from https://<redacted>@h/x" in text


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(["=", "@", "bearer ", "BeArEr\t", "BEARER", "bearer", "x://u:p@", "?token=",
                                 "&Sig=", "/store/unmerged/a.root", " ", "İ", "ſ", "K", "é", "abc", "R", "e"]),
                max_size=12).map("".join))
def test_the_cheap_first_test_lets_every_secret_through(text: str) -> None:
    """Whatever the first test returns as it is, the three substitutions would have left as it is too."""
    whole = redact_module._BEARER.sub(lambda m: m.group(1) + REDACTED, redact_module._QUERY.sub(
        lambda m: m.group(1) + REDACTED, redact_module._USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)))
    assert redact(text) == whole
