"""A real Rucio server (PyPI rucio 41.x, SQLite, gunicorn) in its own virtual environment.

`rucio_server` starts it once per session on a free loopback port with a fresh database;
`RucioServer.admin_client()` is a rucio-clients Client of its root account for setting up RSEs.
The generic schema of a plain Rucio server accepts upper-case RSE names only (CMS runs its
own policy package), so the test RSEs are named like T2_US_NEBRASKA.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import requests

from servers import Process, free_port, run_script, server_dir, server_fixture, wait_port

ROOT_USER, ROOT_PASS = "ddmlab", "secret"  # bootstrap identity written by rucio-server.sh
DOMAINS = {"lan": {"read": 1, "write": 1, "delete": 1},
           "wan": {"read": 1, "write": 1, "delete": 1, "third_party_copy_read": 1, "third_party_copy_write": 1}}


@dataclass
class RucioServer:
    url: str
    directory: Any

    def source(self, directory: Path, **config: Any) -> Any:
        """MSUnmerged's RucioSource as the root account (password in `directory`), RucioConfig keys overridden."""
        from MSUnmerged.config import AuthConfig, RucioConfig
        from MSUnmerged.sources.rucio import RucioSource

        (directory / "pw").write_text(ROOT_PASS + "\n")
        cfg = RucioConfig(host=self.url, auth_host=self.url, account="root", auth_type="userpass",
                          username=ROOT_USER, password_file=str(directory / "pw"), timeout_s=20)
        for key, value in config.items():
            setattr(cfg, key, value)
        return RucioSource(cfg, AuthConfig(), directory / "state")

    def admin_client(self) -> Any:
        from rucio.client import Client

        return Client(rucio_host=self.url, auth_host=self.url, account="root", auth_type="userpass",
                      creds={"username": ROOT_USER, "password": ROOT_PASS}, timeout=30)


def add_cms_rse(client: Any, name: str, site: str | None = None, tier: int = 2, country: str = "US",
                rse_type: str = "DISK", cms_type: str = "real", prefix: str = "/store/test/rucio",
                hostname: str = "xrootd.example.org", posix: bool = False) -> None:
    """An RSE with the attributes CMS sets, and an xrootd protocol whose PFNs end in the LFN (posix: a
    file:// protocol instead, PFNs <prefix>/<lfn> as CMS's lfn2pfn and the site's posix storage.json
    map them)."""
    client.add_rse(name, rse_type=rse_type)  # the RSE's own type, which expressions see as rse_type
    attrs = {"cms_type": cms_type, "tier": str(tier), "country": country}
    if site:
        attrs["site"] = site
    for key, value in attrs.items():
        client.add_rse_attribute(name, key, value)
    if posix:
        client.add_rse_attribute(name, "lfn2pfn_algorithm", "cms_lfn")  # test/scripts/rucio-server.sh
        client.add_protocol(name, {"scheme": "file", "hostname": "localhost", "port": 0, "prefix": prefix,
                                   "impl": "rucio.rse.protocols.posix.Default", "domains": DOMAINS})
    else:
        client.add_protocol(name, {"scheme": "root", "hostname": hostname, "port": 1094, "prefix": prefix,
                                   "impl": "rucio.rse.protocols.xrootd.Default", "domains": DOMAINS})


@server_fixture
def rucio_server() -> Iterator[RucioServer]:
    """A Rucio server on 127.0.0.1 with a fresh SQLite database; stopped by PID at the end."""
    directory = server_dir("rucio")
    port = free_port()
    run_script("rucio-server.sh", "init", str(directory), str(port))
    argv = run_script("rucio-server.sh", "argv", str(directory), str(port)).split("\n")
    proc = Process("rucio", [a for a in argv if a], directory, env={"RUCIO_CONFIG": str(directory / "rucio.cfg")})
    try:
        wait_port(port, proc=proc, timeout=120)
        url = f"http://127.0.0.1:{port}"
        requests.get(f"{url}/ping", timeout=30).raise_for_status()
        yield RucioServer(url, directory)
    finally:
        proc.stop()
