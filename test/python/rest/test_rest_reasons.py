"""Every reason the service can record has its entry (an anchor) in docs/operations.md, where the page links it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from MSUnmerged import guards, statemachine
from MSUnmerged.config import Config
from MSUnmerged.rest.page import Context, reason_anchor, reason_link
from MSUnmerged.sources.errors import KINDS

REPO = Path(__file__).resolve().parents[3]
SRC = REPO / "src" / "python" / "MSUnmerged"
ANCHORS = set(re.findall(r'<a id="([^"]+)"></a>', (REPO / "docs" / "operations.md").read_text()))


def raised(error: str) -> set[str]:
    """The first arguments of every `error("...")` raised in the service's code."""
    return {m for path in SRC.rglob("*.py") if "worker" not in path.parts
            for m in re.findall(rf'{error}\("([a-z_]+)"', path.read_text())}


def reasons() -> set[str]:
    names = {v for k, v in vars(statemachine).items() if k.isupper() and isinstance(v, str)}  # skip reasons
    names |= set(statemachine.RSEState)
    names |= {v for k, v in vars(guards).items() if k.isupper() and isinstance(v, str)}  # guards, apply refusals
    names |= {f"{source}_{kind}" for source in ("rucio", "conmon", "wmstats", "wmstats-t0") for kind in KINDS}
    names |= {f"backend_{kind}" for kind in raised("BackendError")}
    names |= raised("LedgerError")
    return names | {"internal_error", "lease_lost", "leased_elsewhere", "done_this_cycle"}


@pytest.mark.parametrize("reason", sorted(reasons()))
def test_every_reason_has_its_entry(reason: str) -> None:
    assert reason_anchor(reason) in ANCHORS, f"docs/operations.md has no <a id=\"{reason_anchor(reason)}\">"


def test_reason_links() -> None:
    assert reason_anchor("wmstats-t0_http_status") == "source-http_status"
    assert reason_anchor("backend_timeout") == "backend_timeout"  # not the sources' timeout
    config = Config()
    config.rest.operations_url = "https://x.example/ops.md"
    link = reason_link("conmon_timeout", Context.from_config(config))
    assert link == '<a class="reason" href="https://x.example/ops.md#source-timeout">conmon_timeout</a>'
    assert reason_link('<b x="1">', Context.from_config(config)).endswith(
        '#%3Cb%20x%3D%221%22%3E">&lt;b x=&quot;1&quot;&gt;</a>')  # a hostile reason stays text
    assert 'title="docs/operations.md#dry_run"' in reason_link("dry_run", Context())
