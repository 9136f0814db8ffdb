"""Issue 26's attacks on `msunmerged serve` itself (its own process, the embedded SecantusDB, the REST
settings as shipped): slow clients, a replayed trigger after a restart, the embedded database killed.
Each test failed before; what the service did then is named in its docstring. Loopback only: the
attackers connect from other 127.0.0.x addresses, as other hosts would.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from MSUnmerged.rest.auth import sign
from MSUnmerged.samplesite import DEMO_RSE, DEMO_SITE

from rest_kit import offline_site
from servers import Process, free_port, run_script, server_dir, wait_port
from test_rest_api import get, operator_headers, post
from test_rest_serve import REPO, SERVE

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class Serve:
    """`msunmerged serve` over OfflineSources of the sample RSE and the embedded database, restartable on
    the same state; REST settings are the shipped defaults but for `rest` (TOML lines)."""

    def __init__(self, work: Path, rest: str = "", key_bytes: Optional[bytes] = None) -> None:
        self.work = work
        sources, storage, siteconf = offline_site(work)
        self.sources = sources
        key = work / "hmac.key"
        key.write_bytes(key_bytes or os.urandom(32))
        self.key = key.read_bytes()
        self.port, self.metrics_port = free_port(), free_port()
        self.config = work / "msunmerged.toml"
        self.config.write_text(f"""
[service]
state_dir = "{work / 'state'}"
interval_s = 3600
[planner]
skip_rses = ["{DEMO_RSE}"]
[jobs.sites.{DEMO_RSE}]
site = "{DEMO_SITE}"
siteconfig = "{siteconf}"
[rest]
metrics_port = {self.metrics_port}
hmac_key_file = "{key}"
audit_log = "{work / 'audit.jsonl'}"
cache_ttl_s = 0
operator_logins = ["olivia", "rita", "sam", "jmuller"]
{rest}
""")
        self.url = f"http://127.0.0.1:{self.port}/ms-unmerged"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}"
        self.proc: Optional[Process] = None

    def start(self) -> "Serve":
        env = {"PYTHONPATH": f"{REPO / 'src' / 'python'}:{os.environ.get('PYTHONPATH', '')}"}
        self.proc = Process("serve", ["python3", "-c", SERVE, str(self.config), str(self.sources), str(self.port)],
                            self.work, env=env)
        for port in (self.port, self.metrics_port):  # the servers start one after the other
            wait_port(port, timeout=120, proc=self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=60)
            self.proc = None

    def db_pid(self) -> int:
        return int(json.loads((self.work / "state" / "db.json").read_text())["pid"])


@pytest.fixture(scope="module")
def served() -> Iterator[Serve]:
    serve = Serve(server_dir(f"serve-attacks-{uuid.uuid4().hex[:6]}")).start()
    try:
        yield serve
    finally:
        serve.stop()


def wait_for(what: str, test: Any, timeout: float) -> Any:
    """Poll `test()` until it returns something true; fail after `timeout` s (a bound on a hang)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = test()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout} s")


class Tricklers:
    """Connections that send their request a byte at a time (every 0.5 s) until stopped or closed by the
    server; each from its source address."""

    def __init__(self) -> None:
        self.socks: list[tuple[socket.socket, bytes]] = []
        self.closed_by_server: list[bytes] = []  # what the server answered to those it ended
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def open(self, port: int, source: str, start: bytes, rest: bytes) -> None:
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
        s.sendall(start)
        s.setblocking(False)
        self.socks.append((s, rest))

    def _run(self) -> None:
        while not self._stop.wait(0.5) and self.socks:
            for entry in list(self.socks):
                s, rest = entry
                try:
                    answer = s.recv(65536)
                    self.closed_by_server.append(answer)
                    self.socks.remove(entry)
                    s.close()
                    continue
                except BlockingIOError:
                    pass  # nothing from the server: go on
                except OSError:
                    self.socks.remove(entry)
                    s.close()
                    continue
                try:
                    s.send(rest[:1])
                    self.socks[self.socks.index(entry)] = (s, rest[1:] or b"X")
                except OSError:
                    self.socks.remove(entry)
                    s.close()

    def __enter__(self) -> "Tricklers":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)
        for s, _ in self.socks:
            s.close()


def slow_header(port: int, path: str) -> tuple[bytes, bytes]:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Slow: ".encode(), b"a" * 10000


def slow_body(served: Serve, headers: dict[str, str], length: int = 5000) -> tuple[bytes, bytes]:
    lines = ["POST /ms-unmerged/data/trigger HTTP/1.1", "Host: x", "Content-Type: application/json",
             f"Content-Length: {length}", *(f"{k}: {v}" for k, v in headers.items())]
    body = json.dumps({"rse": DEMO_RSE, "mode": "plan", "request_id": uuid.uuid4().hex}).encode()
    return ("\r\n".join(lines) + "\r\n\r\n").encode(), body + b" " * (length - len(body))


def cms_user(key: bytes, login: str) -> dict[str, str]:
    """A CMS user's headers as the front end signs them: no operator role."""
    headers = {"cms-auth-status": "ok", "cms-authn-login": login, "cms-authn-dn": f"/CN={login}",
               "cms-authz-user": "group:cms"}
    return {**headers, "cms-authn-hmac": sign(headers, key)}


def test_status_and_metrics_answer_under_slow_clients(served: Serve) -> None:
    """Before: 60 clients sending headers a byte a second kept `status` from answering (32 threads, each
    held as long as bytes came), 40 slow trigger bodies did the same (the body was read before the caller
    was checked, and a refused one was drained), and 3 slow clients blocked the metrics port (2 threads).
    Then (issue 38) 80 slow-header clients from 8 addresses, each under its address's cap, held all 64 threads:
    now a request takes a thread only once its headers are all here."""
    with Tricklers() as slow:
        for n in range(80):  # from eight addresses, ten each
            slow.open(served.port, f"127.0.0.{2 + n // 10}", *slow_header(served.port, "/ms-unmerged/data/status"))
        for n in range(40):  # the front end's address: slow bodies of CMS users streamed through it
            slow.open(served.port, "127.0.0.10", *slow_body(served, cms_user(served.key, f"user{n}")))
        for n in range(20):
            slow.open(served.metrics_port, "127.0.0.11", *slow_header(served.metrics_port, "/metrics"))
        end = time.monotonic() + 8  # within rest.request_deadline_s: the slow headers are all still held
        answered = 0
        while time.monotonic() < end:
            status, body, _ = get(served, "data/status?detail=false")
            assert status == 200, body
            with socket.create_connection(("127.0.0.1", served.metrics_port), timeout=5) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                assert s.recv(100).startswith(b"HTTP/1.1 200")
            answered += 1
            time.sleep(0.5)
        bodies_answered = [a for a in slow.closed_by_server if b"403" in a.split(b"\r\n", 1)[0]]
        cut = [a for a in slow.closed_by_server if a.startswith(b"HTTP/1.1 408")]
    assert len(bodies_answered) >= 10, slow.closed_by_server[:5]  # refused with their body still unsent
    # Answered again and again while every slow client was still held (none cut at the deadline yet): with the
    # threads all held, the first answer came only once the deadline freed some (one answer, after ~10 s).
    assert answered >= 3 and not cut, (answered, cut[:3])


def test_a_request_must_arrive_whole_in_time(served: Serve) -> None:
    """Before: a client sending its headers, or an operator's trigger body, a byte at a time held its
    thread for as long as it kept sending (the socket timeout restarts with every byte)."""
    with Tricklers() as slow:
        slow.open(served.port, "127.0.0.10", *slow_header(served.port, "/ms-unmerged/data/status"))
        slow.open(served.port, "127.0.0.10", *slow_body(served, operator_headers(served.key, "olivia")))
        wait_for("both cut at rest.request_deadline_s (10 s)", lambda: len(slow.closed_by_server) == 2, 20)
    assert all(a.startswith(b"HTTP/1.1 408") for a in slow.closed_by_server), slow.closed_by_server


def test_a_replayed_trigger_is_refused_after_a_restart(served: Serve) -> None:
    """Before: the ids of accepted triggers were kept in memory only: the same signed request was
    accepted again (202) once serve had restarted."""
    body = {"rse": DEMO_RSE, "mode": "plan", "request_id": uuid.uuid4().hex}
    headers = operator_headers(served.key, "rita")
    assert post(served, "data/trigger", body, headers)[0] == 202
    served.stop()
    served.start()
    status, answer = post(served, "data/trigger", body, headers)
    assert status == 409 and "already used" in answer["error"], answer


def metric(served: Serve, name: str) -> Optional[float]:
    _, text, _ = get(served, "metrics")
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return values[0] if values else None


def test_serve_restarts_its_embedded_database(served: Serve) -> None:
    """Before: when the embedded database died, serve neither started it again nor told its liveness
    probe: every answer was 503 from then on. Then (issue 38) the killed server stayed a zombie until serve
    exited: serve's watch revives it through another EmbeddedMongo than the one that started it."""
    body = {"rse": DEMO_RSE, "mode": "plan", "request_id": uuid.uuid4().hex}
    headers = operator_headers(served.key, "sam")
    assert post(served, "data/trigger", body, headers)[0] == 202
    before = served.db_pid()
    os.kill(before, signal.SIGKILL)
    wait_for("the killed database reaped", lambda: not Path(f"/proc/{before}").exists(), 30)  # not a zombie
    wait_for("status answering again", lambda: served.db_pid() != before and get(served, "data/status")[0] == 200, 60)
    assert metric(served, "msunmerged_embedded_db_restarts_total") == 1.0
    assert post(served, "data/trigger", body, headers)[0] == 409  # the ledger outlived its server
    again = served.db_pid()
    os.kill(again, signal.SIGKILL)  # the restarted one too: started by the watch's EmbeddedMongo
    wait_for("the restarted database reaped", lambda: not Path(f"/proc/{again}").exists(), 30)
    wait_for("status answering again", lambda: served.db_pid() != again and get(served, "data/status")[0] == 200, 60)
    assert metric(served, "msunmerged_embedded_db_restarts_total") == 2.0
    assert get(served, "data/health?probe=live")[0] == 200


def test_liveness_fails_once_the_database_is_gone_for_db_dead_s() -> None:
    """Before: the liveness probe answered 200 whatever became of the database. Here the embedded one is
    killed with its data folder moved away (a file in its place), so it cannot be started again, until
    the folder is put back."""
    serve = Serve(server_dir(f"serve-dead-{uuid.uuid4().hex[:6]}"), "db_dead_s = 10").start()
    data = serve.work / "state" / "db"
    away = data.with_name("db.away")
    try:
        assert get(serve, "data/health?probe=live")[0] == 200
        data.rename(away)
        data.write_text("not a data folder")
        os.kill(serve.db_pid(), signal.SIGKILL)
        try:
            status, body, _ = wait_for("liveness failing", lambda: (lambda r: r if r[0] == 503 else None)(
                get(serve, "data/health?probe=live")), 40)
            assert "rest.db_dead_s" in body["error"], body
            assert metric(serve, "msunmerged_ledger_silent_seconds") > 10
            assert metric(serve, "msunmerged_embedded_db_restarts_total") == 0.0
        finally:
            data.unlink()
            away.rename(data)
        wait_for("liveness back once the database could start again",
                 lambda: get(serve, "data/health?probe=live")[0] == 200, 60)
        assert metric(serve, "msunmerged_embedded_db_restarts_total") == 1.0
    finally:
        serve.stop()


# -- many users behind one front-end node (issue 38) -------------------------------------------------------


FRONT_END = json.loads((REPO / "test" / "fixtures" / "cmsauth" / "front-end.json").read_text())


def front_end(case: str) -> dict[str, str]:
    """A user's request headers as dmwm/cmsauth's SetCMSHeaders signed them (test/fixtures/cmsauth)."""
    return FRONT_END[case]["headers"]


def exchange(port: int, path: str, headers: dict[str, str], method: str = "GET", body: bytes = b"",
             read: bool = True, source: str = "127.0.0.1") -> tuple[int, dict[str, str], bytes]:
    """One request from `source` (by default the front-end node's address), its headers sent as the front end
    sends them (UTF-8 values); (status, headers, body) of the answer, read whole when `read`."""
    lines = [f"{method} {path} HTTP/1.1", "Host: x", "Connection: close", f"Content-Length: {len(body)}",
             *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(source, 0)) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
            if not read and b"\r\n\r\n" in answer:
                break
    head, _, rest = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    return int(status_line.split()[1]), dict(h.split(": ", 1) for h in header_lines if ": " in h), rest


@pytest.fixture(scope="module")
def behind_front_end() -> Iterator[Serve]:
    """serve with the shipped limits, its key the one dmwm/cmsauth signed the fixture's users with."""
    serve = Serve(server_dir(f"serve-front-end-{uuid.uuid4().hex[:6]}"),
                  key_bytes=bytes.fromhex(FRONT_END["operator"]["key_hex"])).start()
    try:
        yield serve
    finally:
        serve.stop()


def test_one_user_behind_the_front_end_does_not_starve_another(behind_front_end: Serve) -> None:
    """Before: every user arrives from the front-end node's address, whose 16 connections one user could fill:
    40 ordinary concurrent GETs of one user left others 7 of 24 and 4 of 25 status calls (the rest 503), and
    slow streams and slow trigger bodies filled the same slots. Now each verified user has its own share.
    Here the front end's requests are replayed (the headers dmwm/cmsauth signed) from its address."""
    # jmuller (an operator), eve
    one_user_does_not_starve_another(behind_front_end, behind_front_end.port, front_end("operator"),
                                     front_end("self_made_role"))


def one_user_does_not_starve_another(served: Serve, port: int, greedy: dict[str, str], other: dict[str, str],
                                     sources: tuple[str, str] = ("127.0.0.1", "127.0.0.1")) -> None:
    """`greedy`'s 6 slow trigger bodies (held until the deadline) and 40 concurrent requests (status, and streams
    read only at their end), sent to `port`, leave `other`'s status answered 200 every time, while `greedy` gets
    200s and 429s: its share (rest.max_requests_per_caller, 8) and no more."""
    base = "/ms-unmerged/data"
    statuses: list[int] = []
    retry_after: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def hammer(n: int) -> None:
        # The greedy user's requests, over and over: status, and streams it reads only at the end.
        path = f"{base}/files?rse={DEMO_RSE}&stream=true" if n % 4 == 0 else f"{base}/status"
        while not stop.is_set():
            status, headers, _ = exchange(port, path, greedy, source=sources[0])
            with lock:
                statuses.append(status)
                if status == 429:
                    retry_after.append(headers.get("Retry-After", ""))

    with Tricklers() as slow:
        for _ in range(6):  # the greedy operator's slow trigger bodies: each holds a thread until the deadline
            slow.open(port, sources[0], *slow_body(served, greedy))
        threads = [threading.Thread(target=hammer, args=(n,), daemon=True) for n in range(40)]
        for t in threads:
            t.start()
        answered = []
        end = time.monotonic() + 8  # within rest.request_deadline_s: the slow bodies are all still held
        while time.monotonic() < end:
            status, _, body = exchange(port, f"{base}/status?detail=false", other, source=sources[1])
            answered.append(status)
            time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(60)
    assert answered and set(answered) == {200}, answered
    assert 429 in statuses and 200 in statuses, sorted(set(statuses))  # the greedy user got its share, no more
    assert set(statuses) <= {200, 429}, sorted(set(statuses))
    assert retry_after and all(v.isdigit() and int(v) >= 1 for v in retry_after), retry_after[:5]


def test_one_direct_client_does_not_starve_another(behind_front_end: Serve) -> None:
    """Without the front end each address is a caller: one address's 40 concurrent requests and slow bodies leave
    another's status answered."""
    one_user_does_not_starve_another(behind_front_end, behind_front_end.port, {}, {}, ("127.0.0.20", "127.0.0.21"))


@pytest.fixture(scope="module")
def go_front_end(behind_front_end: Serve) -> Iterator[int]:
    """A live front end before `behind_front_end`: a reverse proxy built from dmwm/cmsauth's Go code signing with
    SetCMSHeaders as CMSWEB's auth-proxy-server does (test/scripts/cmsauth-signer.sh; its users: jmuller, eve).
    Built from cmsauth's files kept in test/fixtures/cmsauth/src (docs/testing.md): a build that fails fails."""
    binary = run_script("cmsauth-signer.sh", "front-end", timeout=900).strip().splitlines()[-1]
    work = behind_front_end.work
    users = work / "front-end-users.json"
    users.write_text(json.dumps({name: {"user": FRONT_END[case]["user"], "cric": {}}
                                 for name, case in (("jmuller", "operator"), ("eve", "self_made_role"))}))
    port = free_port()
    proc = Process("front-end", [binary, f"127.0.0.1:{port}", f"http://127.0.0.1:{behind_front_end.port}",
                                 str(work / "hmac.key"), str(users)], work)
    try:
        wait_port(port, timeout=60, proc=proc)
        yield port
    finally:
        proc.stop(timeout=30)


def test_one_user_through_the_live_front_end_does_not_starve_another(behind_front_end: Serve,
                                                                       go_front_end: int) -> None:
    """As above, through a running front end built from dmwm/cmsauth's code (Go's ReverseProxy: its own
    connections to the back end, bodies streamed as they come); jmuller adds the operator role himself (the front
    end signs it, as the real one does) to send trigger bodies."""
    greedy = {"X-Test-User": "jmuller", "cms-authz-operator": "group:dmwm"}
    one_user_does_not_starve_another(behind_front_end, go_front_end, greedy, {"X-Test-User": "eve"})
    body = json.dumps({"rse": DEMO_RSE, "mode": "plan", "request_id": uuid.uuid4().hex}).encode()
    # Accepted once jmuller's slow bodies, cut with their clients, no longer count (429 until then).
    wait_for("jmuller's trigger accepted through the front end", lambda: exchange(
        go_front_end, "/ms-unmerged/data/trigger", {**greedy, "Content-Type": "application/json"}, "POST",
        body)[0] == 202, 60)
    accepted = [json.loads(line) for line in (behind_front_end.work / "audit.jsonl").read_text().splitlines()
                if '"accepted"' in line][-1]
    assert accepted["login"] == "jmuller" and accepted["caller"] == "login:jmuller"
    assert accepted["forwarded_for"] == "127.0.0.1"  # the chain Go's ReverseProxy made
