"""Property: whatever is done to a sealed plan directory (lines added, dropped or edited in its jobs files and
dirs.txt, a new jobs file, summary fields changed), apply either records and submits exactly the sealed plan
or refuses with plan_modified, recording and submitting nothing. Never anything in between."""
from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymongo import MongoClient

from MSUnmerged import guards, planner, sample
from MSUnmerged.config import Config
from MSUnmerged.dumpreader import iter_chunks
from MSUnmerged.ledger import Ledger
from MSUnmerged.service import Service
from MSUnmerged.sources.offline import STATS_FILE, dump_file
from service_kit import LoggedLocalBackend, dump_lines, make_site, rse_list

pytestmark = pytest.mark.integration
RSE = "T2_IT_Property"
OTHER = "T2_IT_Neighbour"
# Lines a mutation may add: the dump's protected and planned files, a file the dump never listed, and
# lines that are no LFN at all.
EXTRA_LINES = [b"/store/unmerged/NotInDump/x.root", b"/store/data/Run3/x.root", b"/store/unmerged/../data/x.root",
               b"/store/unmerged/a/b.root\r/store/unmerged/c/d.root", b"relative/x.root", b"",
               b"/store/unmerged/Run3Era/Primary0"]
SUMMARY_EDITS = [("files_to_delete", 1), ("files_to_delete", 10 ** 9), ("files_total", 1), ("rse", OTHER),
                 ("dump_version", 1.0), ("job_sizes", [1]), ("job_files", []), ("guard", None),
                 ("protected_count", 1), ("jobs", 0)]


class Pristine:
    """One sealed plan of a site, planned once; each example works on a copy."""

    def __init__(self, base: Path) -> None:
        self.base = base
        lines, protected = dump_lines(RSE, 200)
        self.lines = [x.encode() for x in lines]
        self.protected = protected
        src = base / "src"
        dump = dump_file(src, RSE)
        dump.parent.mkdir(parents=True)
        dump.write_bytes(b"\n".join(self.lines) + b"\n")
        self.config = Config()
        self.config.service.state_dir = str(base / "state")
        self.config.planner.files_per_job = 100
        self.config.guards.max_delete_fraction = 1.0
        make_site(base, src, RSE, self.config)
        self.sources = rse_list(src, [RSE, OTHER])
        self.plan_dir = base / "plan"
        now = time.time()  # the scan apply reads again: it starts after the site's files were made
        all_stats = sample.stats_for(RSE, len(lines), now, now)
        (src / STATS_FILE).write_text(json.dumps(all_stats))
        stats = all_stats[RSE]
        planner.plan(RSE, iter_chunks(str(dump)), protected, self.config, self.plan_dir, stats=stats)
        self.planned = {x for p in (self.plan_dir / "jobs").iterdir() for x in p.read_bytes().split(b"\n") if x}
        assert self.planned


@pytest.fixture(scope="module")
def pristine() -> Iterator[Pristine]:
    base = Path(tempfile.mkdtemp(prefix="sealed-prop-"))
    yield Pristine(base)
    shutil.rmtree(base, ignore_errors=True)


LINE = st.sampled_from(EXTRA_LINES) | st.integers(0, 199)  # an index: that dump line
MUTATION = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(["job", "dirs", "new_job"]), LINE),
    st.tuples(st.just("drop"), st.sampled_from(["job", "dirs"]), st.integers(0, 10 ** 6)),
    st.tuples(st.just("edit"), st.sampled_from(["job", "dirs"]), st.integers(0, 10 ** 6), st.integers(0, 255)),
    st.tuples(st.just("summary"), st.sampled_from(SUMMARY_EDITS)),
)


def mutate(plan_dir: Path, lines: list[bytes], mutation: tuple[Any, ...]) -> None:
    kind = mutation[0]
    if kind == "summary":
        field, value = mutation[1]
        path = plan_dir / "summary.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), field: value}, indent=1, sort_keys=True))
        return
    target = mutation[1]
    if target == "new_job":
        path = plan_dir / "jobs" / "job-900000.txt"
    elif target == "dirs":
        path = plan_dir / "dirs.txt"
    else:
        path = sorted((plan_dir / "jobs").iterdir())[0]
    data = path.read_bytes() if path.exists() else b""
    if kind == "add":
        line = mutation[2] if isinstance(mutation[2], bytes) else lines[mutation[2]]
        path.write_bytes(data + line + b"\n")
    elif kind == "drop" and data:
        kept = data.split(b"\n")[:-1]
        del kept[mutation[2] % len(kept)]
        path.write_bytes(b"".join(x + b"\n" for x in kept))
    elif kind == "edit" and data:
        pos = mutation[2] % len(data)
        path.write_bytes(data[:pos] + bytes([mutation[3]]) + data[pos + 1:])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(MUTATION, max_size=4))
def test_apply_is_exactly_the_sealed_plan_or_nothing(pristine: Pristine, mongo_client: MongoClient,
                                                     mutations: list[tuple[Any, ...]]) -> None:
    work = Path(tempfile.mkdtemp(dir=pristine.base))
    plan_dir = work / "plan"
    shutil.copytree(pristine.plan_dir, plan_dir)
    for m in mutations:
        mutate(plan_dir, pristine.lines, m)
    db = mongo_client[f"p_{uuid.uuid4().hex[:12]}"]
    backend = LoggedLocalBackend(pristine.config, work / "batch")
    svc = Service(pristine.config, Ledger(db), pristine.sources, backend, instance="prop")
    try:
        result = svc.runner.apply_plan(plan_dir, pristine.protected)
        recorded = {d["lfn"].encode() for d in Ledger(db).reads.file_records()}
        submitted = {x.encode() for d in (work / "batch").glob("*/manifest.json")
                     for x in json.loads(d.read_text())["task"]["steps"][0]["lfns"]}
        if result.reason == "":
            assert recorded == submitted == pristine.planned, mutations
        else:
            assert (result.state, result.reason) == ("guarded", guards.PLAN_MODIFIED), (result, mutations)
            assert recorded == set() and backend.submissions() == [] and db.jobs.count_documents({}) == 0
            assert db.rses.count_documents({"_id": {"$ne": RSE}}) == 0
    finally:
        svc.stop()
        mongo_client.drop_database(db.name)
