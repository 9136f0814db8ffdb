"""A trace of one RSE through `Runner.run_once` (issue 40, item 5): how often the run crosses from one file of
the package into another, how many files it enters, and how many of those crossings go back into a file it has
already been in. The RSE is the demo's sample site (`msunmerged demo`'s set-up: offline sources, the embedded
database, the local batch backend, dry run), worked twice as the demo does: the first run (plan, record, submit,
wait for the jobs, collect) and the closing one.

    python3 bench/trace_run.py [--files 200] [--depth 1] [--group service,ledger] [--src OTHER/src/python] [--edges]

Counted over the calls the run makes in its own thread (sys.setprofile; the batch system's jobs are processes of
their own): a *crossing* is a call of a function of the package whose file differs from the file of the nearest
function of the package below it on the stack (a generator resumed counts as a call, as Python reports it);
`files` the files entered that way, the run's own file (service/run.py) included once entered; `revisits` the
crossings into a file entered before (the run's own file counting as entered from the start); `edges` the
distinct (caller's file, callee's file) pairs among the crossings (the others grow with the sample's size where a
loop calls into another file per line; these do not). Views: `files` (every crossing), `grouped` (`--group a,b`:
each of these sub-packages counted as one file), `depth<N>` (`--depth N`: the crossings at most N files deep, 1
being the calls the run's own file makes into others). One JSON line per view and run; `--edges` adds the
crossings by caller and callee file. `threads`: the threads alive after the run (the service's own).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))  # seam.py beside this file


class Crossings:
    """The profile hook: every crossing between files of the package, with its depth below the traced call."""

    def __init__(self, package: Path) -> None:
        self.root = str(package) + "/"
        self.calls: list[tuple[int, str, str]] = []  # (depth, caller's file, callee's file), relative to the package
        self.base: Optional[FrameType] = None  # the frame of the traced call (run_once)

    def _in_package(self, frame: Optional[FrameType]) -> Optional[FrameType]:
        while frame is not None and not frame.f_code.co_filename.startswith(self.root):
            frame = frame.f_back
        return frame

    def _depth(self, caller: FrameType) -> int:
        """The crossings on the stack from the traced call up to `caller`, plus one."""
        depth, frame, file = 1, caller, caller.f_code.co_filename
        while frame is not None and frame is not self.base:
            frame = self._in_package(frame.f_back)
            if frame is not None and frame.f_code.co_filename != file:
                depth, file = depth + 1, frame.f_code.co_filename
        return depth

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(self.root):
            return
        if self.base is None:
            self.base = frame
            return
        caller = self._in_package(frame.f_back)
        if caller is not None and caller.f_code.co_filename != frame.f_code.co_filename:
            cut = len(self.root)
            self.calls.append((self._depth(caller), caller.f_code.co_filename[cut:], frame.f_code.co_filename[cut:]))

    def trace(self, work: Callable[[], Any]) -> Any:
        previous = sys.getprofile()
        sys.setprofile(self)
        try:
            return work()
        finally:
            sys.setprofile(previous)


def view(calls: list[tuple[int, str, str]], start: str, groups: tuple[str, ...] = (),
         depth: Optional[int] = None) -> dict[str, Any]:
    """Crossings, files entered and revisits of a trace (see the module's text); `groups`: sub-packages counted as
    one file each; `depth`: only the crossings at most this deep."""
    def unit(path: str) -> str:
        return next((g + "/" for g in groups if path.startswith(g + "/")), path)

    entered: set[str] = set()
    edges: set[tuple[str, str]] = set()
    visited, crossings, revisits = {unit(start)}, 0, 0
    for level, caller, callee in calls:
        name = unit(callee)
        if depth is not None and level > depth or name == unit(caller):
            continue
        crossings += 1
        revisits += name in visited
        visited.add(name)
        entered.add(name)
        edges.add((unit(caller), name))
    return {"calls": crossings, "files": len(entered), "revisits": revisits, "edges": len(edges)}


def set_up(work: Path, files: int) -> tuple[Any, Any, str]:
    """The demo's sample site, sources and configuration (dry run); the service's context manager."""
    from MSUnmerged.cli.demo import demo_config, write_sources
    from MSUnmerged.config import load_config
    from MSUnmerged.samplesite import DEMO_RSE, fill_storage, rescan, write_site
    from MSUnmerged.sources.offline import OfflineSources, dump_file
    from MSUnmerged.wiring import build_service
    sources = write_sources(work / "sources", files)
    storage = work / "storage"
    fill_storage(storage, dump_file(sources, DEMO_RSE))
    rescan(sources, DEMO_RSE)
    config = demo_config(load_config(env={}), work, write_site(work, storage), apply=False)
    return build_service(config, sources=OfflineSources(sources)), config, DEMO_RSE


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=200, help="files in the sample site")
    p.add_argument("--wait", type=float, default=300.0, help="seconds the first run waits for its jobs")
    p.add_argument("--group", default="service,ledger", help="sub-packages also counted as one file each")
    p.add_argument("--depth", type=int, default=1, help="also the crossings at most this deep below run_once")
    p.add_argument("--src", help="another tree's src/python to trace instead of this checkout's")
    p.add_argument("--edges", action="store_true", help="also print each run's crossings by caller and callee file")
    args = p.parse_args()
    sys.path.insert(0, str(Path(args.src).resolve() if args.src else Path(__file__).resolve().parents[1] / "src" / "python"))
    import MSUnmerged
    from seam import runner_of
    package = Path(MSUnmerged.__file__).resolve().parent
    groups = tuple(g for g in args.group.split(",") if g)
    with tempfile.TemporaryDirectory(prefix="msunmerged-trace-") as tmp:
        service_cm, _, rse = set_up(Path(tmp), args.files)
        with service_cm as service:
            runner = runner_of(service)
            start = str(Path(sys.modules[type(runner).__module__].__file__).resolve().relative_to(package))
            for name, wait in (("first", args.wait), ("closing", 0.0)):
                hook = Crossings(package)
                result = hook.trace(lambda: runner.run_once(rse, wait_s=wait))
                for label, kwargs in (("files", {}), ("grouped", {"groups": groups}), (f"depth{args.depth}",
                                                                                        {"depth": args.depth})):
                    print(json.dumps({"bench": "trace_run", "run": name, "view": label, "action": str(result.action),
                                      "threads": threading.active_count(), **view(hook.calls, start, **kwargs)}))
                if args.edges:
                    edges = Counter((caller, callee) for _, caller, callee in hook.calls)
                    print(json.dumps({"bench": "trace_run", "run": name, "edges": {
                        f"{caller} -> {callee}": n for (caller, callee), n in edges.most_common()}}))
            service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
