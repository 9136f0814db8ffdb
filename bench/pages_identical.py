"""The per-file pages' answers of two codes compared byte for byte on one ledger: `msunmerged serve` started with
each code (`--before SRC` and this checkout's) on the same SecantusDB, the same requests asked of both, each
followed by its `next` cursor up to 4 pages. A change meant to make the pages cheaper must leave every byte as it
was: files by job (first and last jobs of the RSE), by error class, by state, under directories (datasets, their
parents, block directories, partial names; packed buckets included when the ledger packs), directory records,
streamed answers.

    python bench/pages_identical.py --url mongodb://127.0.0.1:PORT/?directConnection=true --rse RSE \
        --dir /store/unmerged/.../ --before /tmp/before/src/python
"""
from __future__ import annotations

import argparse
import http.client
import json
import sys
from pathlib import Path
from urllib.parse import quote

from pymongo import MongoClient

import bench_rest


def requests(db: object, rse: str, folder: str) -> list[str]:
    """The first page of each question asked (limits that split buckets and windows at odd places)."""
    jobs = [j["_id"] for j in db.jobs.find({"rse": rse}, {"_id": 1}).limit(400)]  # type: ignore[attr-defined]
    jobs = jobs[:6] + jobs[-6:] + jobs[len(jobs) // 2:len(jobs) // 2 + 3]
    classes = sorted(db.files.distinct("error_class", {"rse": rse}))  # type: ignore[attr-defined]
    out = [f"files?rse={rse}&limit={n}" for n in (1, 7, 100, 1000)]
    out += [f"files?rse={rse}&job={quote(j)}&limit={n}" for j in jobs for n in (100, 13)]
    out += [f"files?job={quote(j)}&limit=50" for j in jobs[:3]]
    out += [f"files?rse={rse}&error_class={c}&limit={n}" for c in classes for n in (100, 9)]
    out += [f"files?rse={rse}&state={s}&limit={n}" for s in ("planned", "deleted", "would_delete", "missing", "failed",
                                                             "submitted") for n in (100, 11)]
    buckets = list(db.buckets.find({"rse": rse}, {"dir": 1, "names": 1}).limit(200))  # type: ignore[attr-defined]
    paths = [folder, folder.rsplit("/", 2)[0] + "/", "/store/unmerged/"] + [b["dir"] + "/" for b in buckets[::20]] + \
        [b["dir"] + "/" + b["names"].split("\n")[-1] for b in buckets[5::20]]
    for x in paths:
        x = x.rstrip("/")
        for prefix in (x + "/", x[:-2], x.rsplit("/", 1)[0] + "/", x.rsplit("/", 1)[0] + "/0", x.rsplit("/", 2)[0] + "/"):
            out += [f"files?rse={rse}&dir={quote(prefix)}&limit={n}" for n in (3, 100)]
    out += [f"files?rse={rse}&dir={quote(folder)}&state={s}&limit=100" for s in ("planned", "deleted", "failed")]
    out += [f"dirs?rse={rse}&limit=100", f"dirs?rse={rse}&state=refused&limit=100"]
    if jobs:
        out.append(f"files?rse={rse}&job={quote(jobs[0])}&stream=true")
    out.append(f"files?rse={rse}&dir={quote(folder)}&stream=true")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="the ledger's MongoDB URL")
    ap.add_argument("--rse", required=True)
    ap.add_argument("--dir", required=True, help="a dataset folder of the RSE, with its trailing slash")
    ap.add_argument("--before", required=True, help="the other code's src/python")
    ap.add_argument("--logs", default="/tmp", help="folder of the two servers' logs")
    args = ap.parse_args()
    db = MongoClient(args.url).msunmerged
    asked = requests(db, args.rse, args.dir)
    servers = [bench_rest.start_serve({"MSUNMERGED_MONGO__URL": args.url}, Path(args.logs) / f"pages-identical-{i}.log",
                                      src=src) for i, src in enumerate((args.before, None))]
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=120) for _, port in servers]

    def get(conn: http.client.HTTPConnection, path: str) -> tuple[int, bytes]:
        conn.request("GET", f"{bench_rest.BASE}/{path}")
        resp = conn.getresponse()
        return resp.status, resp.read()

    answers = same = records = 0
    try:
        for first in asked:
            path: str | None = first
            for _ in range(4):
                if path is None:
                    break
                (s1, b1), (s2, b2) = (get(c, path) for c in conns)
                answers += 1
                if (s1, b1) == (s2, b2):
                    same += 1
                else:
                    print(f"DIFFERENT: {path}: {s1} {len(b1)} bytes / {s2} {len(b2)} bytes", flush=True)
                doc = json.loads(b1) if s1 == 200 else {}
                records += len(doc.get("result", []))
                path = f"{first}&after={quote(doc['next'])}" if doc.get("next") else None
    finally:
        for proc, _ in servers:
            bench_rest.stop(proc)
    print(f"{same} of {answers} answers identical ({records:,} records)")
    return 0 if same == answers else 1


if __name__ == "__main__":
    sys.exit(main())
