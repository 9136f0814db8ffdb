"""A real Prometheus AlertManager (Debian's prometheus-alertmanager) on a free loopback port, one per session:
the receiver of the service's alert pushes. Also `promtool`, which checks the shipped Prometheus rules."""
from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any, Iterator

import pytest

from servers import Process, free_port, run_script, server_dir, server_fixture, wait_port

# Every alert goes to a receiver that sends nothing anywhere: the tests read the alerts back from the API.
CONFIG = """
route:
  receiver: nowhere
  group_wait: 1s
receivers:
  - name: nowhere
"""


class AlertManagerServer:
    def __init__(self, url: str) -> None:
        self.url = url
        self.push_url = f"{url}/api/v2/alerts"

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """The alerts AlertManager holds now (its API v2: active ones by default)."""
        query = "&".join(f"filter={urllib.parse.quote(f'{k}={json.dumps(v)}')}" for k, v in filters.items())
        with urllib.request.urlopen(f"{self.push_url}?{query}", timeout=30) as answer:
            return json.loads(answer.read())


@pytest.fixture(scope="session")
def prometheus_tools() -> tuple[str, str]:
    """(alertmanager binary, promtool), installed once by test/scripts/prometheus.sh."""
    alertmanager, promtool = run_script("prometheus.sh", timeout=1200).strip().splitlines()[-2:]
    return alertmanager, promtool


@server_fixture
def alertmanager(prometheus_tools: tuple[str, str]) -> Iterator[AlertManagerServer]:
    """AlertManager listening on 127.0.0.1 only (clustering off), its state in this session's folder."""
    directory = server_dir("alertmanager")
    (directory / "alertmanager.yml").write_text(CONFIG)
    port = free_port()
    proc = Process("alertmanager", [prometheus_tools[0], f"--config.file={directory / 'alertmanager.yml'}",
                                    f"--storage.path={directory / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                                    "--cluster.listen-address="], directory)
    try:
        wait_port(port, timeout=60, proc=proc)
        yield AlertManagerServer(f"http://127.0.0.1:{port}")
    finally:
        proc.stop()
