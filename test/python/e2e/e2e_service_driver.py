"""The service as its own process for the end-to-end tests (built by wiring.build_service from the config).

usage: e2e_service_driver.py CONFIG serve                 Service.serve() (the polling loop) + the REST app
       e2e_service_driver.py CONFIG once RSE [MAX_RUNS]   run_once(RSE) until it settles, then exit

Environment (fault injection):
  E2E_MARKS         folder where a file "<step>-<rse>" is created when the hook sees that step
  E2E_PAUSE         "step:rse:occurrence": at that occurrence of the step for that RSE, create the mark
                    "paused" and sleep forever (the test then SIGKILLs the process)
  E2E_KILL_RECORDING  an RSE: SIGKILL ourselves inside record_plan, right after the first batch of that RSE's
                    buckets is written (before its fences, jobs and the end of `recording`), after creating
                    the mark "armed"
  E2E_HOLD_RSE      right after submitting jobs of this RSE, condor_hold them (jobs that wait at the site)
  E2E_CONDOR_ROOT   the pool's chroot (for condor_hold)
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from MSUnmerged.config import load_config
from MSUnmerged.wiring import build_service

log = logging.getLogger("e2e_service_driver")
SETTLED = ("clean", "done_with_errors", "skipped", "guarded")


def condor(*argv: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG"}
    return subprocess.run(["chroot", os.environ["E2E_CONDOR_ROOT"], *argv], capture_output=True, text=True,
                          env=env, timeout=60).stdout


def hold_jobs(rse: str, timeout: float = 20.0) -> None:
    """Hold the RSE's jobs as a busy site would keep them waiting: idle ones are held; jobs still held for
    their input spooling are held again as soon as the spooling finishes."""
    root = os.environ["E2E_CONDOR_ROOT"]
    env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG"}
    mine = f'regexp("^{rse}:", MSUnmergedJobId)'
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        subprocess.run(["chroot", root, "condor_hold", "-reason", "e2e: site busy", "-constraint",
                        f"{mine} && JobStatus == 1"], capture_output=True, env=env, timeout=60)
        out = subprocess.run(["chroot", root, "condor_q", "-allusers", "-constraint", mine, "-af", "JobStatus",
                              "HoldReasonCode"], capture_output=True, text=True, env=env, timeout=60).stdout
        states = [line.split() for line in out.splitlines() if line.strip()]
        if states and all(s[0] == "5" and s[1:] != ["16"] for s in states):
            return
        time.sleep(0.1)
    log.warning("could not hold every job of %s: %s", rse, out)


def make_hook():
    marks = Path(os.environ.get("E2E_MARKS", "."))
    pause = os.environ.get("E2E_PAUSE", "")
    p_step, p_rse, p_occ = (pause.split(":") + ["", "", "1"])[:3] if pause else ("", "", "1")
    hold_rse = os.environ.get("E2E_HOLD_RSE", "")
    seen: dict[tuple[str, str], int] = {}
    lock = threading.Lock()

    def hook(step: str, rse: str) -> None:
        with lock:
            seen[(step, rse)] = seen.get((step, rse), 0) + 1
            n = seen[(step, rse)]
        (marks / f"{step}-{rse}").touch()
        if hold_rse and rse == hold_rse and n == 1 and step == "intent":
            condor("condor_off", "-negotiator")  # nothing of this submission may start before it is held
        if hold_rse and rse == hold_rse and n == 1 and step == "submitted":
            try:
                hold_jobs(rse)
            finally:
                condor("condor_on", "-negotiator")
            (marks / f"held-{rse}").touch()
        if step == p_step and rse == p_rse and n == int(p_occ):
            (marks / "paused").touch()
            while True:
                time.sleep(60)

    return hook


def kill_inside_recording(rse: str) -> None:
    """SIGKILL this process once the first batch of `rse`'s buckets is in the ledger: a crash in the middle of
    record_plan's writes, wherever the scheduler would have put a timed kill."""
    from MSUnmerged.ledger import recording
    write = recording.insert_ignoring_duplicates

    def write_then_die(coll, docs):  # type: ignore[no-untyped-def]
        write(coll, docs)
        if coll.name == "buckets" and docs and docs[0].get("rse") == rse:
            (Path(os.environ.get("E2E_MARKS", ".")) / "armed").touch()
            os.kill(os.getpid(), signal.SIGKILL)
    recording.insert_ignoring_duplicates = write_then_die


def serve(config_path: str) -> int:
    """`msunmerged serve` as the CLI runs it (wiring.build_service + wiring.serve, SIGTERM as Ctrl-C), with the test
    hook installed."""
    from MSUnmerged.cli import EXIT_INTERRUPTED, terminate_as_interrupt
    from MSUnmerged.wiring import serve as wired_serve

    config = load_config(config_path)
    try:
        with terminate_as_interrupt(), build_service(config) as svc:
            svc.runner.hook = make_hook()
            (Path(os.environ.get("E2E_MARKS", ".")) / "serving").touch()
            wired_serve(config, svc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return 0


def once(config_path: str, rse: str, max_runs: int = 60) -> int:
    config = load_config(config_path)
    if os.environ.get("E2E_KILL_RECORDING"):
        kill_inside_recording(os.environ["E2E_KILL_RECORDING"])
    with build_service(config) as svc:
        svc.runner.hook = make_hook()
        for _ in range(max_runs):
            result = svc.runner.run_once(rse)
            print(json.dumps(result.to_dict()), flush=True)
            if result.action in ("finish", "skip") or result.state in SETTLED:
                if result.action != "poll":
                    break
            time.sleep(1.5)
        svc.runner.leases.stop_heartbeat()
    return 0


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
    config_path, mode, *rest = argv
    if mode == "serve":
        return serve(config_path)
    if mode == "once":
        return once(config_path, rest[0], int(rest[1]) if len(rest) > 1 else 60)
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
