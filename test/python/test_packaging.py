"""An installed (non-editable) wheel finds its default configuration as package data."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("compiler, engine", [(None, "compiled"), ("false", "pure")], ids=["with-cc", "without-cc"])
def test_installed_wheel_loads_the_shipped_defaults(tmp_path: Path, compiler: str | None, engine: str) -> None:
    """Without a working C compiler the optional extension is left out and the wheel still installs."""
    tree = tmp_path / "tree"  # a copy, so that building leaves no build/ or egg-info in the checkout
    tree.mkdir()
    for name in ("setup.py", "requirements.txt"):
        shutil.copy(ROOT / name, tree / name)
    for name in ("src", "etc"):
        shutil.copytree(ROOT / name, tree / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build_env = {**os.environ, **({"CC": compiler} if compiler else {})}
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(tree)],
                   check=True, capture_output=True, env=build_env)
    (wheel,) = (tmp_path / "dist").glob("msunmerged-*.whl")
    target = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True,
                   capture_output=True)
    shutil.rmtree(tree)  # nothing of the source tree may be needed any more
    probe = ("import MSUnmerged, MSUnmerged.config as c; print(MSUnmerged.__file__); "
             "print(c.DEFAULT_CONFIG.is_file()); "  # load_config refuses a missing file: no silent built-in defaults
             "cfg = c.load_config(env={}); print(cfg.planner.exclude[0], cfg.jobs.credential); "
             "from MSUnmerged import planlines; print(planlines.engine(cfg.planner.engine).name)")
    env = {**os.environ, "PYTHONPATH": str(target)}
    env.pop("MSUNMERGED_CONFIG", None)
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, check=True, capture_output=True,
                         text=True).stdout.split("\n")
    assert out[0].startswith(str(target))  # the installed copy, not the checkout
    assert out[1:4] == ["True", "/store/unmerged/logs/prod/ none", engine]
    shipped = target / "MSUnmerged" / "msunmerged.toml"
    assert not shipped.is_symlink() and shipped.read_text() == (ROOT / "etc" / "msunmerged.toml").read_text()
