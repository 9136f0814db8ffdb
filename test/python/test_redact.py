"""Secrets in URLs taken out of failure details and logs: the one function, and the places that use it."""
from __future__ import annotations

import io
import logging
import string

import pytest
import requests
from hypothesis import assume, given, settings
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
    ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: Basic {REDACTED}"),
    ("login failed: password=hunter2 user=bob", f"login failed: password={REDACTED} user=bob"),
    ("token: abc123 expired", f"token: {REDACTED} expired"),
    ('{"password": "my secret", "user": "x"}', f'{{"password": {REDACTED}, "user": "x"}}'),
    ("X-Rucio-Auth-Token: root-root-webui-0123456789abcdef", f"X-Rucio-Auth-Token: {REDACTED}"),
    ("Cookie: a=1; sid=xyz", f"Cookie: {REDACTED}"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig-abc done", f"jwt {REDACTED} done"),
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
                                 "&Sig=", "/store/unmerged/a.root", " ", "İ", "ſ", "K", "é", "abc", "R", "e", ":",
                                 ": ", "token", "Token \"", "'", "\"", "pwd", "basic ", "BASIC", "eyJ", "eyJab.",
                                 "Cookie", "set-cookie:", "key", "Ke", "y", "\n", "\u2028", "\x0b", "auth"]),
                max_size=12).map("".join))
def test_the_cheap_first_test_lets_every_secret_through(text: str) -> None:
    """Whatever the first test returns as it is, the substitutions would have left as it is too."""
    assert redact(text) == redact_module.substitute(text)


SECRET = st.text(string.ascii_letters + string.digits + "-_", min_size=8, max_size=40)  # base64url: a JWT's too
AROUND = st.text(string.ascii_letters + string.digits + " :/=&?@\"'.,;-_()[]{}\né", max_size=40)
# Every credential form the service can meet: in a URL (user info, query), an HTTP header as a client library
# or a dump writes it, a `name=value` or `name: value` in an error, a JSON or Python repr of a mapping, a bare JWT.
FORMS = ["https://user:{s}@host/x", "mongodb://msunmerged:{s}@db-0:27017/", "GET /files?rse=T2_A&access_token={s}&x=1",
         "davs://se:2880/store/unmerged/f.root?authz={s}", "?X-Amz-Signature={s}#frag", "Authorization: Basic {s}",
         "authorization: bearer {s}", "Proxy-Authorization: Basic {s}", "login failed: password={s} for bob",
         "passwd={s}", "token: {s}", "Token:{s}", "api_key = '{s}'", '{{"password": "{s}", "user": "bob"}}',
         "{{'client_secret': '{s}'}}", "X-Rucio-Auth-Token: {s}", "x-rucio-auth-token:{s}",
         "Cookie: session={s}; other=1", "Cookie: {s}", "Set-Cookie: x={s}; Path=/; HttpOnly", "sessionid={s}",
         "eyJhbGciOiJSUzI1NiJ9.eyJ{s}.c2ln", "eyJ{s}.eyJzdWIiOiIxIn0.", "credential: {s}"]


@settings(max_examples=1500, deadline=None)
@given(form=st.sampled_from(FORMS), secret=SECRET, before=AROUND, after=AROUND)
def test_no_credential_form_survives(form: str, secret: str, before: str, after: str) -> None:
    """A secret in any of the forms, with any text around it (on its own words), never shows; what redact
    gives is stable (redacting it again changes nothing)."""
    assume(secret not in before + after)
    text = f"{before} {form.format(s=secret)} {after}"
    shown = redact(text)
    assert secret not in shown and REDACTED in shown, (text, shown)
    assert redact(shown) == shown


@pytest.mark.parametrize("text", ["KeyError: 'rse'", "conmon: http_status 404: GET stats: HTTP 404",
                                  "gfal-rm: Permission denied: /store/unmerged/a.root", "authenticated as bob"])
def test_texts_with_colons_but_no_credential_are_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize("name, secret", [("Authorization", True), ("cookie", True), ("Set-Cookie", True),
                                          ("X-Rucio-Auth-Token", True), ("X-Api-Key", True), ("Host", False),
                                          ("X-Forwarded-For", False), ("Content-Type", False)])
def test_secret_headers(name: str, secret: bool) -> None:
    assert redact_module.secret_header(name) is secret
