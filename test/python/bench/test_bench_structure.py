"""bench/import_graph.py and bench/trace_run.py: the figures of issue 40, item 5 count what they say."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
sys.path.insert(0, str(BENCH))

import import_graph  # noqa: E402
import trace_run  # noqa: E402


def _package(root: Path, modules: dict[str, str]) -> Path:
    for name, text in modules.items():
        path = root / "MSUnmerged" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_lazy_import_closing_a_cycle_through_a_package_init_is_the_arrow_up(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "config.py": "def f():\n    from MSUnmerged.ledger.base import KEPT\n",
        "ledger/__init__.py": "from MSUnmerged.ledger.store import Ledger\n",
        "ledger/base.py": "KEPT = 10\n",
        "ledger/store.py": "from MSUnmerged import config\nfrom . import base\nimport typing\n"
                           "if typing.TYPE_CHECKING:\n    from MSUnmerged import later\n",
        "later.py": "from MSUnmerged.ledger import base\nx = ledger.base.db\n",
    })
    arrows, reaches = import_graph.graph(root)
    assert arrows["MSUnmerged.config"] == {"MSUnmerged.ledger": True, "MSUnmerged.ledger.base": True}
    assert arrows["MSUnmerged.ledger.store"] == {"MSUnmerged.config": False, "MSUnmerged.ledger.base": False}
    assert import_graph.cycles(arrows, with_lazy=True) == [["MSUnmerged.config", "MSUnmerged.ledger",
                                                            "MSUnmerged.ledger.store"]]
    assert import_graph.cycles(arrows, with_lazy=False) == [] and reaches == {"MSUnmerged.later": 1}


def test_a_trace_view_counts_crossings_files_and_returns() -> None:
    calls = [(1, "service/run.py", "ledger/a.py"), (2, "ledger/a.py", "ledger/b.py"), (1, "service/run.py", "x.py"),
             (2, "x.py", "service/run.py"), (1, "service/run.py", "ledger/a.py")]
    assert trace_run.view(calls, "service/run.py") == {"calls": 5, "files": 4, "revisits": 2, "edges": 4}
    assert trace_run.view(calls, "service/run.py", groups=("ledger",)) == {"calls": 4, "files": 3, "revisits": 2,
                                                                           "edges": 3}
    assert trace_run.view(calls, "service/run.py", depth=1) == {"calls": 3, "files": 2, "revisits": 1, "edges": 2}


@pytest.mark.integration  # the product's embedded database and the local batch backend, as `msunmerged demo`
@pytest.mark.slow
def test_the_trace_of_a_run_enters_the_ledger_and_returns_to_the_runner(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(BENCH / "trace_run.py"), "--files", "50", "--edges"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    views = {(d["run"], d["view"]): d for d in lines if "view" in d}
    first = views[("first", "files")]
    assert first["action"] == "new_generation" and first["files"] > 5 and first["revisits"] >= first["files"]
    assert views[("first", "depth1")]["calls"] < first["calls"]
    edges = next(d["edges"] for d in lines if d.get("run") == "first" and "view" not in d)
    assert edges.get("service/run.py -> ledger/leases.py", 0) > 0
