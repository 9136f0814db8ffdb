"""Builds the site-side worker as one file: a zipapp of MSUnmerged/worker (sources, and their bytecode for the python
that builds it) that any python3 >= 3.9 runs."""
from __future__ import annotations

import hashlib
import os
import py_compile
import shutil
import tempfile
import threading
import zipapp
from pathlib import Path

from MSUnmerged.worker.ids import WORKER_NAME

WORKER_SRC = Path(__file__).resolve().parent.parent / "worker"
PACKAGE = "msunmerged_worker"
_MAIN = f"from {PACKAGE}.__main__ import run_and_exit\nrun_and_exit()\n"


def sources() -> list[Path]:
    return sorted(WORKER_SRC.glob("*.py"))


def worker_version() -> str:
    """Short hash of the worker sources: the same sources give the same version."""
    digest = hashlib.sha256()
    for path in sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def build_worker(dest: Path) -> Path:
    """Write the worker zipapp to `dest` (a file, or a directory to put it in as WORKER_NAME)."""
    dest = Path(dest)
    if dest.is_dir():
        dest = dest / WORKER_NAME
    with tempfile.TemporaryDirectory(prefix="msunmerged-worker-") as tmp:
        pkg = Path(tmp) / PACKAGE
        pkg.mkdir()
        for path in sources():
            shutil.copyfile(path, pkg / path.name)
            # Its bytecode beside it, where zipimport looks: a worker started by this python does not compile its
            # sources at each start (~50 of its ~140 ms of CPU here). Another python finds a foreign magic number
            # and compiles the source; the bytecode of a source that differs is never used (its hash is checked).
            py_compile.compile(str(pkg / path.name), cfile=str(pkg / f"{path.stem}.pyc"),
                               dfile=str(dest / PACKAGE / path.name), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        (pkg / "VERSION").write_text(worker_version())
        (Path(tmp) / "__main__.py").write_text(_MAIN)
        # A name of its own: services sharing a batch folder build the worker at the same time.
        partial = dest.with_name(f"{dest.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        zipapp.create_archive(tmp, partial, interpreter="/usr/bin/env python3")
        partial.replace(dest)  # a job never ships a half-written worker
    return dest
