"""`msunmerged check`: try every part a real instance needs, in the order the README's "Running it for real"
switches them on, and say what works and what is missing: the state folder, the ledger database, the CMSWEB
credential, Rucio, ConMon, WMStats, each configured batch backend, the jobs' storage credential, the REST API's
HMAC key and operator logins. Read-only: nothing is planned, recorded or submitted (the embedded database is
started and stopped, a batch backend's preflight may build the worker zipapp in the state folder).

Exit code: 0 when nothing failed; else the first that applies of 3 (a key missing or unusable), 4 (a credential
missing, expired or refused), 5 (an outside service did not answer)."""
from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from MSUnmerged.cli import EXIT_AUTH, EXIT_BAD_INPUT, EXIT_OK, EXIT_UNAVAILABLE, source_code
from MSUnmerged.cli.output import table
from MSUnmerged.config import Config, ConfigError

OK, MISSING, FAILED, OFF = "ok", "MISSING", "FAILED", "off"


@dataclass
class Outcome:
    """One check's result: OK, MISSING (a key to set), FAILED (tried, did not work) or OFF (not used here)."""

    result: str
    detail: str
    code: int = EXIT_OK  # what a MISSING or FAILED result makes the command's exit code


def register(p: argparse.ArgumentParser) -> None:
    p.set_defaults(run=run)


def run(args: argparse.Namespace, config: Config) -> int:
    config = quick(config)
    rows, codes = [], []
    for name, check in CHECKS:
        outcome = attempt(check, config)
        rows.append((name, outcome.result, outcome.detail))
        if outcome.result in (MISSING, FAILED):
            codes.append(outcome.code)
    table(rows, ("check", "result", "detail"))
    return min(codes) if codes else EXIT_OK


def quick(config: Config) -> Config:
    """The configuration with the sources' retries off and their waits bounded: a check answers in minutes."""
    cfg = dataclasses.replace(config)
    cfg.conmon = dataclasses.replace(config.conmon, retries=0, read_timeout_s=min(config.conmon.read_timeout_s, 60.0))
    cfg.wmstats = dataclasses.replace(config.wmstats, retries=0)
    return cfg


def attempt(check: Callable[[Config], Outcome], config: Config) -> Outcome:
    """Run one check; the errors each part is known to raise are its FAILED outcome with the code they deserve."""
    from MSUnmerged.embedded_mongo import EmbeddedMongoError
    from MSUnmerged.guards import GuardTripped
    from MSUnmerged.jobs.backend import BackendError
    from MSUnmerged.ledger.connect import DatabaseUnreachable
    from MSUnmerged.sources.errors import SourceError

    try:
        return check(config)
    except SourceError as exc:
        return Outcome(FAILED, str(exc), source_code(exc))
    except BackendError as exc:
        credential = exc.kind.startswith("credential") or exc.kind.startswith("auth")
        return Outcome(FAILED, f"{exc.kind}: {exc.message}", EXIT_AUTH if credential else EXIT_UNAVAILABLE)
    except (DatabaseUnreachable, EmbeddedMongoError, GuardTripped) as exc:
        return Outcome(FAILED, str(exc), EXIT_UNAVAILABLE)
    except ConfigError as exc:
        return Outcome(MISSING, str(exc), EXIT_BAD_INPUT)
    except OSError as exc:
        return Outcome(FAILED, f"{exc.strerror}: {exc.filename or ''}", EXIT_BAD_INPUT)


# -- the checks, in the order of the README's "Running it for real" ----------------------------------------------

def state_folder(config: Config) -> Outcome:
    from MSUnmerged import diskspace
    config.state_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=config.state_dir, prefix=".check-"):
        pass
    space = diskspace.measure({"state": config.state_dir})[0]
    from MSUnmerged.present import size
    detail = f"{config.state_dir} writable, {size(space.free)} free of {size(space.size)}"
    return Outcome(FAILED if space.low else OK, detail + (" (nearly full)" if space.low else ""), EXIT_UNAVAILABLE)


def database(config: Config) -> Outcome:
    from MSUnmerged.ledger.connect import hosts, open_client
    started = time.monotonic()
    client, embedded = open_client(config)  # pings it
    try:
        where = (f"the embedded SecantusDB in {config.state_dir}" if embedded is not None
                 else f"mongo.url {', '.join(hosts(config.mongo.url))}")
        return Outcome(OK, f"{where} answered in {time.monotonic() - started:.1f} s; database {config.mongo.database}")
    finally:
        client.close()
        if embedded is not None:
            embedded.stop()


def cmsweb_credential(config: Config) -> Outcome:
    """auth.cert/key, auth.proxy or auth.token_file: the one the sources present (CMSWEB wants one over https)."""
    from MSUnmerged.worker.credentials import proxy_expiry, token_expiry
    a = config.auth
    files = [(k, getattr(a, k)) for k in ("cert", "key", "proxy", "token_file") if getattr(a, k)]
    https = [u for u in (config.conmon.url, config.wmstats.url, config.rucio.host) if u.startswith("https:")]
    if not files:
        if not https:
            return Outcome(OFF, "none configured; no source is https")
        return Outcome(MISSING, f"auth.cert and auth.key, auth.proxy or auth.token_file: {https[0]} wants one",
                       EXIT_BAD_INPUT)
    expiries = []
    for key, path in files:
        data = Path(os.path.expanduser(path)).read_bytes()  # OSError: unreadable (the attempt names the file)
        if not data.strip():
            return Outcome(MISSING, f"auth.{key} {path} is empty", EXIT_AUTH)
        expires = token_expiry(data.decode("ascii", "replace")) if key == "token_file" else \
            proxy_expiry(str(Path(os.path.expanduser(path)))) if key != "key" else None
        if expires is not None:
            if expires < time.time():
                return Outcome(FAILED, f"auth.{key} {path} expired at {_utc(expires)}: renew it", EXIT_AUTH)
            expiries.append(f"auth.{key} until {_utc(expires)}")
    return Outcome(OK, ", ".join(f"auth.{k} {p}" for k, p in files) + (f" ({'; '.join(expiries)})" if expiries else ""))


def rucio(config: Config) -> Outcome:
    from MSUnmerged.sources.rucio import RucioSource
    names = RucioSource(config.rucio, config.auth, config.state_dir).rses(config.planner.rse_expression)
    skipped = set(config.planner.skip_rses)
    mine = [n for n in names if n not in skipped]
    return Outcome(OK if mine else FAILED, f"{config.rucio.host} as {config.rucio.account} ({config.rucio.auth_type}): "
                   f"{len(mine):,} RSEs for {config.planner.rse_expression!r}", EXIT_BAD_INPUT)


def conmon(config: Config) -> Outcome:
    from MSUnmerged.sources.conmon import ConMonClient
    stats = ConMonClient(config.conmon, config.auth).stats()
    done = sum(1 for s in stats.values() if isinstance(s, dict) and s.get("status") == "done")
    return Outcome(OK, f"{config.conmon.url}: scans of {len(stats):,} RSEs, {done:,} done")


def wmstats(config: Config) -> Outcome:
    from MSUnmerged.sources.wmstats import WMStatsClient
    client = WMStatsClient(config.wmstats, config.auth)
    bases = client.protected_lfns()
    return Outcome(OK, f"{' and '.join(url for _, url in client.sources)}: {len(bases):,} protected bases")


def batch_backends(config: Config) -> Outcome:
    """Each (backend, site) the configuration names: its preflight (the pool, schedd or cluster answers and takes
    our token; the local worker starts)."""
    from MSUnmerged.jobs.router import build_backend
    used = {(config.jobs.backend, "")} | {(config.jobs.setting(rse, "backend"), s.site) for rse, s in
                                          config.jobs.sites.items()}
    done = []
    for kind, site in sorted(used):
        backend = build_backend(config, kind, site)
        try:
            backend.preflight()
        finally:
            close = getattr(backend, "close", None)
            if close is not None:
                close()
        done.append(f"{kind}{f' ({site})' if site else ''}")
    return Outcome(OK, "preflight passed: " + ", ".join(done))


def job_credential(config: Config) -> Outcome:
    """The storage credential the jobs carry (jobs.credential, per RSE too): there, not empty, not expiring."""
    from MSUnmerged.jobs.backend import credential_for
    rses = ["", *config.jobs.sites]
    kinds = {}
    for rse in rses:
        credential = credential_for(config.jobs, rse)
        credential.check()
        kinds[credential.kind] = credential.source
    if set(kinds) == {"none"}:
        return Outcome(OFF, "jobs.credential none: the jobs use the site's own (the pilot's) credential")
    return Outcome(OK, ", ".join(f"{k} {s}" for k, s in kinds.items() if k != "none"))


def hmac_key(config: Config) -> Outcome:
    path = config.rest.hmac_key_file
    if not path:
        return Outcome(MISSING, "rest.hmac_key_file: without it every authenticated call (triggers) is refused",
                       EXIT_BAD_INPUT)
    if not Path(os.path.expanduser(path)).read_bytes():
        return Outcome(MISSING, f"rest.hmac_key_file {path} is empty", EXIT_BAD_INPUT)
    return Outcome(OK, f"rest.hmac_key_file {path}")


def operator_logins(config: Config) -> Outcome:
    logins = config.rest.operator_logins
    if not logins:
        return Outcome(OFF, "rest.operator_logins empty: apply triggers are refused (previews only)")
    return Outcome(OK, f"{len(logins)} may apply: {', '.join(logins[:5])}{', ...' if len(logins) > 5 else ''}")


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


CHECKS: list[tuple[str, Callable[[Config], Outcome]]] = [
    ("state folder", state_folder), ("ledger database", database), ("CMSWEB credential", cmsweb_credential),
    ("Rucio", rucio), ("ConMon", conmon), ("WMStats", wmstats), ("batch backend", batch_backends),
    ("jobs' storage credential", job_credential), ("HMAC key", hmac_key), ("operator logins", operator_logins)]
