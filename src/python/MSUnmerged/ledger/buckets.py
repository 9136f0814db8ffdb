"""Bucket documents: one per (directory, round-1 job) of a recorded plan, holding its files' base names and
one outcome code per file (docs/ledger.md, "Shape"). Pure functions: building, reading and rewriting them."""
from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional, Sequence

from MSUnmerged.ledger.states import FileState

# Sorts below every character of a plan line (printable ASCII without space, or UTF-8), so a bucket's _id
# sorts before every file and subdirectory of its directory.
SEP = " "
ROW = "r"  # the file has a row in `files`: the row is its record
CODES = {FileState.PLANNED: "p", FileState.DELETED: "d", FileState.WOULD_DELETE: "w", FileState.MISSING: "m"}
STATE_OF = {code: state for state, code in CODES.items()}
_VALUE_OF = {code: state.value for state, code in CODES.items()}  # a record's `state` (pages build thousands)
NO_SIZE = -1


def bucket_id(prefix: str, directory: str, n: int) -> str:
    """`prefix` is gen_prefix(rse, generation); n the round-1 job's number."""
    return f"{prefix}{directory}/{SEP}{n:06d}"


def dir_of(bid: str, prefix: str) -> Optional[str]:
    """The directory of the bucket whose id is `bid`, or None when `bid` is not a bucket id under `prefix`."""
    cut = bid.rfind("/" + SEP)
    return bid[len(prefix):cut] if bid.startswith(prefix) and cut > len(prefix) else None


def split(lfn: str) -> tuple[str, str]:
    """(directory, base name) of an LFN."""
    d, _, name = lfn.rpartition("/")
    return d, name


def build(rse: str, generation: float, prefix: str, job: str, n: int, lfns: Sequence[str],
          now: float) -> list[dict[str, Any]]:
    """The buckets of one round-1 job: its files grouped by directory, names sorted, all planned."""
    by_dir: dict[str, list[str]] = {}
    for lfn in lfns:
        d, name = split(lfn)
        by_dir.setdefault(d, []).append(name)
    docs = []
    for d, all_names in by_dir.items():
        names = sorted(set(all_names))
        docs.append({"_id": bucket_id(prefix, d, n), "rse": rse, "gen": generation, "dir": d, "job": job,
                     "n": len(names), "names": "\n".join(names), "codes": CODES[FileState.PLANNED] * len(names),
                     **summary(CODES[FileState.PLANNED] * len(names)), "t": now})
    return docs


def summary(codes: str) -> dict[str, Any]:
    """The `states` (present, sorted) and `counts` fields of a bucket with these codes (rows not counted)."""
    counts = {STATE_OF[c].value: codes.count(c) for c in CODES.values() if c in codes}
    return {"states": sorted(counts), "counts": counts}


def names(doc: Mapping[str, Any]) -> list[str]:
    return str(doc["names"]).split("\n")


def lfns(doc: Mapping[str, Any], codes: str) -> list[str]:
    """The LFNs of the bucket's entries whose code is in `codes` (rows not looked at)."""
    head = f"{doc['dir']}/"
    if not str(doc["codes"]).strip(codes):  # every entry's code is one of them (the common case: all planned)
        return [head + name for name in names(doc)]
    return [head + name for name, code in zip(names(doc), doc["codes"]) if code in codes]


def file_prefix(doc: Mapping[str, Any]) -> str:
    """The file _id of the bucket's directory with the trailing slash: add a base name for a file's _id."""
    bid = str(doc["_id"])
    return bid[:bid.rindex(SEP)]


def record(doc: Mapping[str, Any], i: int, name: str) -> dict[str, Any]:
    """Entry i's per-file record, the same dict a row holds."""
    code = doc["codes"][i]
    out: dict[str, Any] = {"_id": file_prefix(doc) + name, "rse": doc["rse"], "gen": doc["gen"],
                           "lfn": f"{doc['dir']}/{name}", "dir": doc["dir"], "state": _VALUE_OF[code],
                           "job": doc["job"], "attempts": 1, "t": doc["t"]}
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
