"""Bucket documents: a round-1 job's files of one directory, or of neighbouring directories of one dataset packed
together, as names relative to the bucket's directory with one outcome code per file (docs/ledger.md, "Shape").
Pure functions: building, reading and rewriting them."""
from __future__ import annotations

import math
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from MSUnmerged.ledger.states import FileState

# Sorts below every character of a plan line (printable ASCII without space, or UTF-8), so a bucket's _id
# sorts before every file and subdirectory of its directory.
SEP = " "
ROW = "r"  # the file has a row in `files`: the row is its record
CODES = {FileState.PLANNED: "p", FileState.DELETED: "d", FileState.WOULD_DELETE: "w", FileState.MISSING: "m"}
STATE_OF = {code: state for state, code in CODES.items()}
_VALUE_OF = {code: state.value for state, code in CODES.items()}  # a record's `state` (pages build thousands)
NO_SIZE = -1
# A job's directories of one dataset share a bucket up to this many files: SecantusDB's cost is per document
# (~0.35 ms each, as much as ~400 names' bytes), and a directory of 25 files was a document of its own. No more:
# a page reads whole buckets, and its first window (records.FIRST_BUCKETS) is sized for ~250 files a bucket.
PACK_NAMES = 250
# How a generation entry without `packing` was recorded: one directory a bucket.
BEFORE_PACKING = {"names": 1}


def bucket_id(prefix: str, directory: str, n: int) -> str:
    """`prefix` is gen_prefix(rse, generation); `directory` the directory of the bucket's first file (its own
    directory, or one below it when directories are packed); n the round-1 job's number. It sorts before every
    file at or after that first one, and as close to it as it can: a page's windows end at bucket ids."""
    return f"{prefix}{directory}/{SEP}{n:06d}"


def split(lfn: str) -> tuple[str, str]:
    """(directory, base name) of an LFN."""
    d, _, name = lfn.rpartition("/")
    return d, name


def _common(a: str, b: str) -> str:
    """The deepest directory holding both directories (component-wise)."""
    while not (b == a or b.startswith(a + "/")):
        a = a.rpartition("/")[0]
    return a


def _packs(dirs: Iterable[str], sizes: Mapping[str, int], floor_depth: int,
           pack_names: int) -> Iterator[tuple[str, list[str]]]:
    """(bucket directory, its directories): the directories in order, neighbours packed while the pack holds at
    most `pack_names` files and their common directory is at least `floor_depth` elements deep (one dataset)."""
    head, members, size = "", [], 0
    for d in dirs:
        common = _common(head, d) if members else d
        if members and (size + sizes[d] > pack_names or common.count("/") + 1 < floor_depth):
            yield head, members
            common, members, size = d, [], 0
        head, size = common, size + sizes[d]
        members.append(d)
    if members:
        yield head, members


def build(rse: str, generation: float, prefix: str, job: str, n: int, lfns: Sequence[str],
          now: float, floor_depth: int, pack_names: int = PACK_NAMES) -> list[dict[str, Any]]:
    """The buckets of one round-1 job: its files grouped by directory, neighbouring directories of a dataset
    (`floor_depth` elements, planner.dir_floor_depth) packed up to `pack_names` files, names sorted, all planned."""
    by_dir: dict[str, set[str]] = {}
    for lfn in lfns:
        d, name = split(lfn)
        by_dir.setdefault(d, set()).add(name)
    docs = []
    for head, members in _packs(sorted(by_dir), {d: len(v) for d, v in by_dir.items()}, floor_depth,
                                   pack_names):
        # Sorted whole: "a/b/x" sorts after "a/b-c/y" although "a/b" sorts before "a/b-c".
        names = sorted(f"{d[len(head) + 1:]}/{name}" if d != head else name for d in members for name in by_dir[d])
        first = f"{head}/{names[0]}".rpartition("/")[0]
        docs.append({"_id": bucket_id(prefix, first, n), "rse": rse, "gen": generation, "dir": head, "job": job,
                     "n": len(names), "names": "\n".join(names), "codes": CODES[FileState.PLANNED] * len(names),
                     **summary(CODES[FileState.PLANNED] * len(names)), "t": now})
    return docs


def summary(codes: str) -> dict[str, Any]:
    """The `states` (present, sorted) and `counts` fields of a bucket with these codes (rows not counted)."""
    counts = {STATE_OF[c].value: codes.count(c) for c in CODES.values() if c in codes}
    return {"states": sorted(counts), "counts": counts}


def pack_floor(entry: Mapping[str, Any]) -> float:
    """The fewest path elements the directory of a bucket that packs several directories has, in the generation
    whose entry (the RSE document's `generations`) is `entry`: inf when it packs none."""
    packing = entry.get("packing", BEFORE_PACKING)
    return packing.get("floor_depth", 0) if packing.get("names", 1) > 1 else math.inf


def names(doc: Mapping[str, Any]) -> list[str]:
    return str(doc["names"]).split("\n")


def lfns(doc: Mapping[str, Any], codes: str) -> list[str]:
    """The LFNs of the bucket's entries whose code is in `codes` (rows not looked at)."""
    head = f"{doc['dir']}/"
    if not str(doc["codes"]).strip(codes):  # every entry's code is one of them (the common case: all planned)
        return [head + name for name in names(doc)]
    return [head + name for name, code in zip(names(doc), doc["codes"]) if code in codes]


def file_prefix(doc: Mapping[str, Any]) -> str:
    """The file _id of the bucket's directory with the trailing slash: add a name for a file's _id."""
    bid = str(doc["_id"])
    return f"{bid[:bid.index('|', bid.index('|') + 1) + 1]}{doc['dir']}/"


def record(doc: Mapping[str, Any], i: int, name: str, fid: Optional[str] = None) -> dict[str, Any]:
    """Entry i's per-file record, the same dict a row holds; `fid`: its file _id when known (entries gives it)."""
    code = doc["codes"][i]
    head = doc["dir"]
    lfn = f"{head}/{name}"
    out: dict[str, Any] = {"_id": fid or file_prefix(doc) + name, "rse": doc["rse"], "gen": doc["gen"],
                           "lfn": lfn, "dir": lfn.rpartition("/")[0] if "/" in name else head,
                           "state": _VALUE_OF[code], "job": doc["job"], "attempts": 1, "t": doc["t"]}
    if code != CODES[FileState.PLANNED]:
        out.update(error_class="", error="")
        sizes = doc.get("sizes")
        if sizes and sizes[i] != NO_SIZE:
            out["size"] = sizes[i]
    return out


def entries(doc: Mapping[str, Any], codes: Optional[str] = None) -> Iterator[tuple[str, int, str]]:
    """(file _id, index, base name) of the entries whose code is in `codes` (default: all but rows)."""
    prefix, keep = file_prefix(doc), codes if codes is not None else "".join(CODES.values())
    for i, (name, code) in enumerate(zip(names(doc), doc["codes"])):
        if code in keep:
            yield prefix + name, i, name


def rewrite(doc: Mapping[str, Any], changes: Mapping[int, tuple[str, Optional[int]]], now: float) -> dict[str, Any]:
    """The `$set` of a bucket whose entries change: index -> (new code, size or None)."""
    codes = list(doc["codes"])
    sizes = list(doc.get("sizes") or [NO_SIZE] * len(codes))
    for i, (code, size) in changes.items():
        codes[i] = code
        if size is not None:
            sizes[i] = size
    text = "".join(codes)
    out = {"codes": text, **summary(text), "t": now}
    if any(s != NO_SIZE for s in sizes):
        out["sizes"] = sizes
    return out
