"""The worker zipapp: its bytecode is used by the python that built it, never in place of a source that differs,
and never by another python."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from MSUnmerged.jobs.workerpkg import PACKAGE, build_worker, sources

# Imports the worker's modules from the zipapp (argv[1]) as the worker would; prints where each came from and one
# of its constants.
WHERE = """
import sys
sys.path.insert(0, sys.argv[1])
import msunmerged_worker.cleanup as cleanup, msunmerged_worker.ids as ids
print(cleanup.__file__, ids.__file__, ids.WORKER_NAME)
"""


def where(pyz: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-I", "-S", "-c", WHERE, str(pyz)], capture_output=True, text=True,
                         check=True, timeout=60)
    return out.stdout.split()


def rewrite(pyz: Path, change: dict[str, bytes]) -> Path:
    """A copy of the zipapp with some members' bytes replaced."""
    out = pyz.with_name("changed.pyz")
    with zipfile.ZipFile(pyz) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, change.get(info.filename, src.read(info)))
    return out


def test_bytecode_beside_every_source_and_used_by_this_python(tmp_path: Path) -> None:
    pyz = build_worker(tmp_path)
    names = zipfile.ZipFile(pyz).namelist()
    for path in sources():
        assert f"{PACKAGE}/{path.name}" in names and f"{PACKAGE}/{path.stem}.pyc" in names
    cleanup, ids, name = where(pyz)
    assert cleanup.endswith(f"{PACKAGE}/cleanup.pyc") and ids.endswith(f"{PACKAGE}/ids.pyc")
    assert name == "msunmerged-worker.pyz"


def test_a_source_that_differs_or_another_python_compiles_the_source(tmp_path: Path) -> None:
    pyz = build_worker(tmp_path)
    with zipfile.ZipFile(pyz) as z:
        ids_src, cleanup_pyc = z.read(f"{PACKAGE}/ids.py"), z.read(f"{PACKAGE}/cleanup.pyc")
    assert b'WORKER_NAME = "msunmerged-worker.pyz"' in ids_src
    changed = rewrite(pyz, {
        f"{PACKAGE}/ids.py": ids_src.replace(b'WORKER_NAME = "msunmerged-worker.pyz"', b'WORKER_NAME = "changed"'),
        f"{PACKAGE}/cleanup.pyc": bytes([cleanup_pyc[0] ^ 0xFF]) + cleanup_pyc[1:],  # another python's magic
    })
    cleanup, ids, name = where(changed)
    assert name == "changed" and ids.endswith(f"{PACKAGE}/ids.py")  # the source as it is, not the stale bytecode
    assert cleanup.endswith(f"{PACKAGE}/cleanup.py")
