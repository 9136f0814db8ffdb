"""WebDAV deletion with the worker's own standard-library client (http.client, ssl): PROPFIND looks, conditional
DELETEs that cannot become recursive.

A WebDAV DELETE of a collection removes its content, and a planned file may be replaced by a directory between
the look and the delete. So each DELETE carries what the look saw: `If-Match` with the ETag the PROPFIND gave
(a directory in the file's place does not match it) and `Depth: 0` (RFC 4918 deletes a collection with Depth
infinity only: a server that follows it refuses a collection). A look without an ETag refuses the file
(unconditional_delete). Before a job's first DELETE, `prepare` checks on a probe collection of the job's own,
made under the unmerged root and removed after, that the server refuses a DELETE of a collection and of a file
whose ETag does not match, and deletes a file whose ETag does: a server that does otherwise is not deleted
through (unconditional_delete). Which servers honour it: docs/jobs.md.
"""
from __future__ import annotations

import email.utils
import http.client
import os
import re
import socket
import ssl
import xml.etree.ElementTree as ET
from typing import Dict, List, Mapping, Optional, Tuple
from urllib.parse import quote, urlsplit

from . import credentials
from .deleters import (AUTH_FAILED, DENIED, MISSING, OK, REFUSED, STORAGE_ERROR, TIMEOUT, Deleter, Result, Seen,
                       not_a_file, watched_map)
from .report import MODIFIED_SINCE_SCAN, UNCONDITIONAL_DELETE

_URL = re.compile(r"^(https?|davs?)://[^/\s]+/\S*$", re.IGNORECASE)
_TLS = ("https", "davs")
_DAV = "{DAV:}"
_PROPFIND = (b'<?xml version="1.0" encoding="utf-8"?><propfind xmlns="DAV:"><prop><resourcetype/><getetag/>'
             b'<getcontentlength/><getlastmodified/></prop></propfind>')
# An ETag no resource has: a DELETE conditional on it must be refused (the probe).
_NO_ETAG = '"msunmerged-matches-nothing"'
_PROBE = ".msunmerged-if-match-probe-"  # the probe collection's name below the unmerged root (+ random hex)
_DONE = (200, 202, 204)
_GRID_CAS = "/etc/grid-security/certificates"  # the grid's CAs on a worker node, when X509_CERT_DIR is not set

Endpoint = Tuple[str, str, Optional[int]]  # (scheme, host, port)


def _split(pfn: str) -> Tuple[Endpoint, str]:
    """((scheme, host, port), quoted path) of a WebDAV PFN."""
    url = urlsplit(pfn)
    return (url.scheme.lower(), url.hostname or "", url.port), quote(url.path or "/", safe="/:@!$&'()*+,;=-._~")


def _status(code: int, text: str) -> Result:
    """The Result of an HTTP answer that deleted nothing."""
    if code == 404:
        return Result(MISSING, text)
    if code == 401:
        return Result(AUTH_FAILED, text)
    if code == 403:
        return Result(DENIED, text)
    if code in (408, 504):
        return Result(TIMEOUT, text, True)
    return Result(STORAGE_ERROR, text, code >= 500 or code == 429)


def _properties(pfn: str, data: bytes) -> Tuple[Dict[str, ET.Element], Optional[Seen]]:
    """(the properties a PROPFIND (Depth 0) answer gives with status 200, None), or ({}, what is seen) when the
    answer is not one entry's."""
    try:
        answers = list(ET.fromstring(data).iter(_DAV + "response"))
    except ET.ParseError as exc:
        return {}, Seen(Result(STORAGE_ERROR, "unreadable PROPFIND answer for %s: %s" % (pfn, exc), True))
    if len(answers) != 1:  # Depth 0 asks for the entry alone: more is a collection's listing, none nothing
        return {}, Seen(Result(STORAGE_ERROR, "PROPFIND (Depth 0) of %s answered for %d entries" % (
            pfn, len(answers)), True)) if not answers else not_a_file(pfn, "a collection (listed)")
    props = [p for stat in answers[0].iter(_DAV + "propstat")
             if " 200 " in (stat.findtext(_DAV + "status") or "") for p in stat.iter(_DAV + "prop")]
    return {child.tag: child for prop in props for child in prop}, None


def _text(found: Dict[str, ET.Element], name: str) -> Optional[str]:
    """The text of a DAV: property ("" when empty), None when the answer has none."""
    element = found.get(_DAV + name)
    return None if element is None else element.text or ""


def _file_seen(pfn: str, found: Dict[str, ET.Element]) -> Seen:
    """What a look at a file sees from its properties: a collection is not a file, a file without a strong ETag
    cannot be deleted safely."""
    kind = found.get(_DAV + "resourcetype")
    if kind is not None and kind.find(_DAV + "collection") is not None:
        return not_a_file(pfn, "a collection")
    etag = (_text(found, "getetag") or "").strip()
    if not etag or etag.startswith("W/"):
        return Seen(Result(REFUSED, "%s: the server gave %s ETag, so its DELETE cannot be made conditional" % (
            pfn, "a weak" if etag else "no"), reason=UNCONDITIONAL_DELETE))
    try:
        length, when = _text(found, "getcontentlength"), _text(found, "getlastmodified")
        size = None if length is None else int(length)
        mtime = email.utils.parsedate_to_datetime(when).timestamp() if when else None
    except (TypeError, ValueError) as exc:
        return Seen(Result(STORAGE_ERROR, "unreadable PROPFIND answer for %s: %s" % (pfn, exc), True))
    return Seen(None, size, mtime, etag=etag if etag.startswith('"') else '"%s"' % etag)


class WebDavDeleter(Deleter):
    """PROPFIND (Depth 0) per file, DELETE with If-Match and Depth: 0 per file; no rmdir, no listing (a DELETE of
    a collection is recursive)."""

    name = "webdav"
    batch_size = 100
    can_rmdir = False
    mtime_step = 1.0  # getlastmodified gives whole seconds
    remote_checks = "propfind (DELETE If-Match ETag, Depth 0)"

    def __init__(self, timeout: float, env: Optional[Mapping[str, str]] = None) -> None:
        super().__init__(timeout, env)
        self._conns: Dict[Endpoint, http.client.HTTPConnection] = {}
        self._ready: Optional[Tuple[Optional[Result]]] = None  # the probe's answer, once made

    def accepts(self, pfn: str) -> bool:
        return bool(_URL.match(pfn)) and bool(urlsplit(pfn).hostname)

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        cas = self.env.get("X509_CERT_DIR") or (_GRID_CAS if os.path.isdir(_GRID_CAS) else "")
        if cas:
            ctx.load_verify_locations(capath=cas)
        if self.env.get(credentials.PROXY_VAR):
            ctx.load_cert_chain(self.env[credentials.PROXY_VAR])  # a proxy file holds its key and chain
        return ctx

    def _request(self, method: str, pfn: str, headers: Dict[str, str], body: Optional[bytes] = None
                 ) -> Tuple[int, str, bytes]:
        """(status, "HTTP <status> <reason> from <method> <pfn>", body); OSError or HTTPException when there is no
        answer. One connection per endpoint, made again once when the server closed a kept-alive one."""
        endpoint, path = _split(pfn)
        token = credentials.bearer_token(self.env)
        sent = dict(headers, **({"Authorization": "Bearer " + token} if token else {}))
        while True:
            conn = self._conns.get(endpoint)
            again = conn is not None  # a kept-alive connection the server may have closed meanwhile: one more try
            if conn is None:
                scheme, host, port = endpoint
                conn = http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self._context()) \
                    if scheme in _TLS else http.client.HTTPConnection(host, port, timeout=self.timeout)
                self._conns[endpoint] = conn
            try:
                conn.request(method, path, body=body, headers=sent)
                answer = conn.getresponse()
                data = answer.read()
                return answer.status, "HTTP %d %s from %s %s" % (answer.status, answer.reason, method, pfn), data
            except (OSError, http.client.HTTPException):
                conn.close()
                del self._conns[endpoint]
                if not again:
                    raise

    def _call(self, method: str, pfn: str, headers: Dict[str, str],
              body: Optional[bytes] = None) -> Tuple[Optional[int], str, bytes, Optional[Result]]:
        """_request, its failure as a Result (timeout, storage_error) instead of an exception."""
        try:
            code, text, data = self._request(method, pfn, headers, body)
            return code, text, data, None
        except socket.timeout as exc:  # TimeoutError from python 3.10 on
            return None, "", b"", Result(TIMEOUT, "%s %s: %s" % (method, pfn, exc), True)
        except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
            return None, "", b"", Result(STORAGE_ERROR, "%s %s: %s" % (method, pfn, exc or type(exc).__name__), True)

    def look(self, pfn: str) -> Seen:
        """PROPFIND Depth 0: a collection is not a file, a file without a strong ETag cannot be deleted safely."""
        code, text, data, failed = self._call("PROPFIND", pfn, {"Depth": "0", "Content-Type": "application/xml"},
                                              _PROPFIND)
        if failed is not None:
            return Seen(failed)
        if code != 207:
            return Seen(_status(code, text))  # type: ignore[arg-type]
        found, unusable = _properties(pfn, data)
        return unusable if unusable is not None else _file_seen(pfn, found)

    def inspect(self, pfns: List[str], directory: bool = False) -> List[Seen]:
        if directory:
            return [Seen()] * len(pfns)
        return watched_map(self.look, pfns, self.timeout + 10, Seen)

    def delete(self, pfn: str, etag: Optional[str]) -> Result:
        """DELETE conditional on the ETag the look saw; anything else than that file deletes nothing."""
        if etag is None:
            return Result(REFUSED, "%s was not looked at: no ETag to make its DELETE conditional" % pfn,
                          reason=UNCONDITIONAL_DELETE)
        code, text, _, failed = self._call("DELETE", pfn, {"If-Match": etag, "Depth": "0"})
        if failed is not None:
            return failed
        if code in _DONE:
            return OK
        if code in (400, 409, 412):  # the probe saw this server delete a file that matches: this is not one
            return Result(REFUSED, "%s: the entry is not the file the look saw" % text, reason=MODIFIED_SINCE_SCAN)
        if code == 207:  # a multi-status answer: the server acted on more than one resource
            return Result(STORAGE_ERROR, "%s: a multi-status answer to the DELETE of a file" % text)
        return _status(code, text)  # type: ignore[arg-type]

    def unlink(self, pfns: List[str], looks: List[Seen]) -> List[Result]:
        return watched_map(lambda pair: self.delete(*pair), [(p, s.etag) for p, s in zip(pfns, looks)],
                           self.timeout + 10)

    def prepare(self, dry_run: bool) -> Optional[Result]:
        """The probe (module note), once per job; a dry run writes nothing and skips it."""
        if dry_run:
            return None
        if self._ready is None:
            self._ready = (self._probe(),)
        return self._ready[0]

    def _probe(self) -> Optional[Result]:
        home = self.root.rstrip("/") + "/" + _PROBE + os.urandom(8).hex() + "/"
        inner = home + "probe"

        def refused(why: str) -> Result:
            return Result(REFUSED, "the WebDAV server at %s cannot be trusted with a conditional DELETE: %s" % (
                self.root, why), reason=UNCONDITIONAL_DELETE)
        code, text, _, failed = self._call("MKCOL", home, {})
        if failed is not None or code in (401, 403):  # the credential is refused: the files say so
            return failed or _status(code, text)  # type: ignore[arg-type]
        if code != 201:
            return refused("cannot make the probe collection (%s)" % text)
        try:
            code, text, _, failed = self._call("PUT", inner, {"Content-Type": "application/octet-stream"}, b"")
            if failed is not None or code not in (200, 201, 204):
                return failed or refused("cannot write the probe file (%s)" % text)
            seen = self.look(inner)
            if seen.result is not None:
                return seen.result if seen.result.reason == UNCONDITIONAL_DELETE else \
                    refused("cannot look at the probe file (%s)" % seen.result.error)
            for target, what in ((inner, "a file"), (home, "a collection holding a file")):
                code, text, _, failed = self._call("DELETE", target, {"If-Match": _NO_ETAG, "Depth": "0"})
                if failed is not None:
                    return failed
                if code in _DONE or code == 207:
                    return refused("it deleted %s whose ETag did not match (%s)" % (what, text))
            code, text, _, failed = self._call("DELETE", inner, {"If-Match": seen.etag or "", "Depth": "0"})
            if failed is not None or code not in _DONE:
                return failed or refused("it did not delete a file whose ETag matched (%s)" % text)
            return None
        finally:
            self._call("DELETE", inner, {})  # the job's own probe: gone already when all went well
            self._call("DELETE", home, {})
