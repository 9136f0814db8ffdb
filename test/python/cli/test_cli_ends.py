"""Every command ends cleanly: a reader that goes away (`files --json | head`) ends it quietly with 141, as SIGPIPE
ends `yes | head`; Ctrl-C ends it with 130 and one line wherever it lands, pymongo's clean-up included (a
`__del__`, a weakref callback or an atexit hook, where Python can only print an exception and carry on).

Real processes (the launcher) on the real embedded SecantusDB (the demo's ledger) or the test SecantusDB server.
"""
from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Iterator

import pytest

from cli_kit import LAUNCHER, cli_env, msunmerged, servers_on
from MSUnmerged.cli import EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPE
from MSUnmerged.samplesite import DEMO_RSE

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def demo_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of commands on the demo's ledger: 3,000 files on the embedded database."""
    work = tmp_path_factory.mktemp("ends")
    env = cli_env(work)
    done = msunmerged("demo", "--dir", str(work / "demo"), "--files", "3000", env=env, timeout=600)
    assert done.returncode == EXIT_OK, done.stderr[-2000:]
    yield {**env, "MSUNMERGED_SERVICE__STATE_DIR": str(work / "demo" / "state"), "MSUNMERGED_MONGO__URL": ""}
    assert servers_on(work / "demo" / "state") == []


def into_closed_pipe(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """The command with its standard output a pipe whose reader has gone: its first write fails."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(LAUNCHER + argv, stdout=write, stderr=subprocess.PIPE, text=True, env=env,
                              timeout=120)
    finally:
        os.close(write)


@pytest.mark.parametrize("argv", [["files", "--rse", DEMO_RSE, "--json"], ["files", "--rse", DEMO_RSE],
                                  ["jobs", "--json"], ["jobs"], ["status"], ["status", "--json"]],
                         ids=lambda argv: " ".join(argv[:1] + argv[3:] if "--rse" in argv else argv))
def test_a_closed_pipe_ends_quietly(demo_ledger: dict[str, str], argv: list[str]) -> None:
    done = into_closed_pipe(argv, demo_ledger)
    assert done.returncode == EXIT_PIPE and done.stderr == "", (done.returncode, done.stderr[-2000:])


@pytest.mark.parametrize("command", ["files --rse {rse} --limit 0 --json | head -n 3",
                                     "jobs --json --limit 100 | head -n 1"])
def test_head_takes_the_first_lines(demo_ledger: dict[str, str], command: str) -> None:
    """The advertised streaming use: `head` reads its lines and leaves; msunmerged ends with 141, saying nothing."""
    script = f"{' '.join(LAUNCHER)} {command.format(rse=DEMO_RSE)}; echo \"codes ${{PIPESTATUS[*]}}\" >&2"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=demo_ledger, timeout=120)
    lines = done.stdout.splitlines()
    assert len(lines) == int(command.split()[-1]) and lines[0].startswith("{"), done.stdout[:500]
    codes = done.stderr.splitlines()[-1].split()[1:]
    # files writes far more than a pipe holds: it sees head leave. jobs may fit in the pipe before head leaves.
    assert codes[0] in ((str(EXIT_PIPE),) if "files" in command else (str(EXIT_PIPE), str(EXIT_OK))), done.stderr
    assert done.stderr.splitlines()[:-1] == [], done.stderr


# pymongo's clean-up, each entered with SIGINT sent to the command itself on entry: the interrupt is raised inside
# it. (module, attribute, object whose attribute it is: "" for the module)
CLEANUPS = {
    "cursor-del": ("pymongo.synchronous.cursor", "Cursor", "__del__"),
    "pool-del": ("pymongo.synchronous.pool", "Pool", "__del__"),
    "client-del": ("pymongo.synchronous.mongo_client", "MongoClient", "__del__"),
    "client-close": ("pymongo.synchronous.mongo_client", "MongoClient", "close"),
    "atexit-executors": ("pymongo.synchronous.monitor", "", "_shutdown_executors"),
}
INTERRUPT_IN = textwrap.dedent('''
    """Test hook: SIGINT to this process on the first entry into one of pymongo's clean-up functions."""
    import importlib, os, signal
    module, owner, name = os.environ["INTERRUPT_IN"].split(":")
    holder = importlib.import_module(module)
    holder = getattr(holder, owner) if owner else holder
    original = getattr(holder, name)

    def entered(*args, **kwargs):
        if not os.path.exists(os.environ["INTERRUPT_MARK"]):
            open(os.environ["INTERRUPT_MARK"], "w").close()
            os.kill(os.getpid(), signal.SIGINT)  # Python runs the handler at its next instruction: in here
            sum(range(1000))
        return original(*args, **kwargs)

    setattr(holder, name, entered)
''')


def one_line_interrupted(done: subprocess.CompletedProcess) -> None:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == EXIT_INTERRUPTED, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("msunmerged") and lines[0].endswith(": interrupted"), done.stderr


@pytest.mark.parametrize("cleanup", list(CLEANUPS))
def test_ctrl_c_in_pymongo_cleanup_ends_the_command(tmp_path: Path, mongo_url: str, cleanup: str) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(INTERRUPT_IN)
    mark = tmp_path / "interrupted"
    env = {**cli_env(tmp_path, MONGO__URL=mongo_url, MONGO__DATABASE=f"ends_{cleanup.replace('-', '_')}"),
           "PYTHONPATH": str(hook), "INTERRUPT_IN": ":".join(CLEANUPS[cleanup]), "INTERRUPT_MARK": str(mark)}
    done = subprocess.run(LAUNCHER + ["status"], capture_output=True, text=True, env=env, timeout=120)
    assert mark.exists(), f"the command never entered {cleanup}: {done.stderr[-2000:]}"
    one_line_interrupted(done)


def test_ctrl_c_at_many_moments_of_a_ledger_command(tmp_path: Path, mongo_url: str) -> None:
    """`status` interrupted from its start-up to its end (imports, configuration, the ledger's client and its
    clean-up, the interpreter's exit): every interrupt that lands before it ends gives 130 and one line."""
    env = cli_env(tmp_path, MONGO__URL=mongo_url, MONGO__DATABASE="ends_moments")
    start = time.monotonic()
    assert msunmerged("status", env=env).returncode == EXIT_OK
    whole = time.monotonic() - start
    interrupted = 0
    for i in range(20):
        proc = subprocess.Popen(LAUNCHER + ["status"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=env)
        time.sleep(whole * (0.1 + 0.9 * i / 19))  # from after Python's own start-up (which no program can guard)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, "", err)
        if done.returncode == EXIT_OK:  # it had ended before the signal came
            assert err == "", err
            continue
        if done.returncode == -signal.SIGINT:
            # It had done its work and was in the interpreter's last teardown, whose default handler ends it as
            # Ctrl-C ends any program (the shell's $? is 130, as for an uncaught KeyboardInterrupt): nothing printed.
            assert err == "", err
            continue
        one_line_interrupted(done)
        interrupted += 1
    assert interrupted >= 2  # not vacuous (how many moments fall inside the command depends on the load)
