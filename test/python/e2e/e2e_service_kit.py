"""The service under test as its own process (e2e_service_driver.py), and waiting on what it does.

The driver builds the service from the configuration (live sources, ledger, routing backend over
CondorBackend) and runs it in serve mode (Service.serve plus the REST app) or drives run_once for
one RSE with a pause at a step (for SIGKILL).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional

from e2e.e2e_world_kit import World, diagnose
from servers import REPO

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "e2e_service_driver.py"


class ServiceProcess:
    """`e2e_service_driver.py` in its own session; stdout/stderr to a log under the world's out/ folder."""

    def __init__(self, world: World, name: str, *args: str, env: Optional[dict[str, str]] = None) -> None:
        out = world.dir / "out"
        out.mkdir(exist_ok=True)
        self.name = name
        self.log = out / f"{name}.log"
        self.marks = out / f"{name}.marks"
        self.marks.mkdir(exist_ok=True)
        full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src" / "python"), str(HERE)]),
                    "E2E_MARKS": str(self.marks), **(env or {})}
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen([sys.executable, str(DRIVER), str(world.config_path), *args],
                                          stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                          start_new_session=True)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_mark(self, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (self.marks / name).exists():
                return
            if not self.alive():
                raise AssertionError(f"{self.name} exited ({self.popen.returncode}) before mark {name}:\n"
                                     f"{self.tail()}")
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: no mark {name} after {timeout} s:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL, the whole process group (the service and any child it has)."""
        if self.alive():
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def stop(self) -> None:
        if self.alive():
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def wait_until(what: str, cond: Callable[[], Any], timeout: float, every: float = 1.0,
               proc: Optional[ServiceProcess] = None) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as exc:  # noqa: BLE001 - a database briefly away, say
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if proc is not None and not proc.alive():
            raise AssertionError(f"service died while waiting for {what}:\n{proc.tail()}")
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}"
                         + (f"\n{proc.tail()}" if proc else "") + diagnose())


SETTLED = ("clean", "done_with_errors", "skipped", "guarded")


def settled(world: World, rses: list[str], states: tuple[str, ...] = SETTLED) -> Callable[[], bool]:
    def check() -> bool:
        return all(world.rse_doc(r).get("state") in states and world.rse_doc(r).get("generation") is not None
                   or world.rse_doc(r).get("reason") in ("scan_stale",) for r in rses)
    return check


def rest_get(world: World, path: str, timeout: float = 10) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{world.rest_port}/ms-unmerged/{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body


def rest_files(world: World, rse: str) -> dict[str, dict[str, Any]]:
    status, body = rest_get(world, f"data/files?rse={rse}&stream=true")
    assert status == 200, body
    return {r["lfn"]: r for r in body["result"]}
