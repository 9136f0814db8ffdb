"""Every bad input an operator may give: one line on stderr naming it, its documented exit code, no traceback."""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Iterator

import pytest

from cli_kit import cli_env, msunmerged, servers_on
from MSUnmerged import __version__, sample
from MSUnmerged.cli import EXIT_BAD_INPUT, EXIT_GUARD, EXIT_UNAVAILABLE, EXIT_USAGE
from servers import free_port
from servers.http_fakes import FakeCMSWeb

PLAN = ["plan", "--rse", "T2_XX_Bad", "--protected", "{protected}", "--stats", "{stats}"]

# (id, command line, settings as MSUNMERGED_<KEY>, exit code, text the one line holds)
CASES = [
    ("log-level-option", ["--log-level", "LOUD", "status"], {}, EXIT_USAGE, "invalid choice: 'LOUD'"),
    ("missing-option", ["plan", "--rse", "X"], {}, EXIT_USAGE, "the following arguments are required"),
    ("unknown-command", ["purge"], {}, EXIT_USAGE, "invalid choice: 'purge'"),
    ("log-level-config", ["status"], {"SERVICE__LOG_LEVEL": "LOUD"}, EXIT_BAD_INPUT, "'service.log_level'"),
    ("malformed-mongo-url", ["status"], {"MONGO__URL": "mongodb://u:p@"}, EXIT_BAD_INPUT, "'mongo.url'"),
    ("mongo-url-scheme", ["jobs"], {"MONGO__URL": "http://db:27017"}, EXIT_BAD_INPUT, "'mongo.url'"),
    ("unreachable-mongo", ["status"], {"MONGO__URL": "mongodb://u:secret@127.0.0.1:{closed_port}/"},
     EXIT_UNAVAILABLE, "127.0.0.1:{closed_port}"),
    ("plan-out-is-a-file", PLAN + ["--dump", "{dump}", "--out", "{a_file}"], {}, EXIT_USAGE,
     "argument --out: {a_file} exists and is not a folder"),
    ("plan-dump-is-a-folder", PLAN + ["--dump", "{work}", "--out", "{work}/p"], {}, EXIT_USAGE,
     "argument --dump: {work} is a folder, not a file"),
    ("serve-port-out-of-range", ["serve", "--port", "99999"], {}, EXIT_USAGE, "99999 is not a port (1-65535)"),
    ("serve-port-not-a-number", ["serve", "--port", "http"], {}, EXIT_USAGE, "'http' is not a whole number"),
    ("demo-dir-is-a-file", ["demo", "--dir", "{a_file}"], {}, EXIT_USAGE,
     "argument --dir: {a_file} exists and is not a folder"),
    ("demo-negative-files", ["demo", "--files", "-5"], {}, EXIT_USAGE, "argument --files: -5 is less than 1"),
    ("jobs-negative-limit", ["jobs", "--limit", "-1"], {}, EXIT_USAGE, "argument --limit: -1 is less than 1"),
    ("files-negative-limit", ["files", "--rse", "T2_XX_Bad", "--limit", "-3"], {}, EXIT_USAGE,
     "argument --limit: -3 is less than 0"),
    ("state-dir-is-a-file", ["status"], {"SERVICE__STATE_DIR": "{a_file}"}, EXIT_BAD_INPUT,
     "'service.state_dir': {a_file} is a file, not a folder"),
    ("state-dir-under-a-file", ["jobs"], {"SERVICE__STATE_DIR": "{a_file}/state"}, EXIT_BAD_INPUT,
     "'service.state_dir': {a_file} is a file, not a folder"),
    ("busy-port", ["serve"], {"REST__PORT": "{busy_port}"}, EXIT_BAD_INPUT, "port {busy_port} on 127.0.0.1 is in use"),
    ("conmon-404", ["clean", "--rse", "T2_XX_Bad"], {"CONMON__URL": "{conmon}", "WMSTATS__URL": "{wmstats}"},
     EXIT_UNAVAILABLE, "conmon: http_status 404"),
    ("files-unknown-rse", ["files", "--rse", "T2_XX_Nowhere"], {}, EXIT_BAD_INPUT, "no RSE 'T2_XX_Nowhere'"),
    ("jobs-unknown-rse", ["jobs", "--rse", "T2_XX_Nowhere"], {}, EXIT_BAD_INPUT, "no RSE 'T2_XX_Nowhere'"),
    ("dump-is-passwd", PLAN + ["--dump", "/etc/passwd", "--out", "{work}/p"], {}, EXIT_GUARD,
     "dump_not_a_dump: not a dump: "),
    ("dump-is-html", PLAN + ["--dump", "{html}", "--out", "{work}/p"], {}, EXIT_GUARD, "HTML"),
    ("dump-is-binary", PLAN + ["--dump", "{binary}", "--out", "{work}/p"], {}, EXIT_GUARD, "binary data"),
]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Files, a busy port, a closed port and a ConMon that answers 404 for the cases above."""
    work = tmp_path_factory.mktemp("bad")
    (work / "protected.json").write_text(json.dumps({"result": ["/store/unmerged/x/y/z/w"]}))
    (work / "stats.json").write_text(json.dumps(sample.stats_for("T2_XX_Bad", 1)))
    (work / "dump.txt").write_text("/store/unmerged/a/b/c/d/e.root\n")
    (work / "a_file").write_text("not a folder")
    (work / "login.html").write_text("<!DOCTYPE html>\n<html><head><title>CERN Single Sign-On</title></head>\n"
                                     + "<body>/store/unmerged/a/b.root</body></html>\n" * 50)
    (work / "blob.bin").write_bytes(bytes(range(256)) * 64)
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    web = FakeCMSWeb()
    web.fault("stats", status=404)
    with web, busy:
        yield {"work": str(work), "protected": str(work / "protected.json"), "stats": str(work / "stats.json"),
               "dump": str(work / "dump.txt"), "a_file": str(work / "a_file"), "html": str(work / "login.html"),
               "binary": str(work / "blob.bin"), "busy_port": str(busy.getsockname()[1]),
               "closed_port": str(free_port()), "conmon": web.conmon_url, "wmstats": web.wmstats_url}


@pytest.mark.integration  # the embedded SecantusDB (files, jobs, clean) and a real HTTP server
@pytest.mark.parametrize("argv,settings,code,text", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_one_line(world: dict[str, str], tmp_path: Path, argv: list[str], settings: dict[str, str],
                            code: int, text: str) -> None:
    env = cli_env(tmp_path, **{k: v.format(**world) for k, v in settings.items()})
    # The timeout only bounds a hang (an unreachable database is given up within 5 s: bench/, not here).
    done = msunmerged(*(a.format(**world) for a in argv), env=env, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert done.returncode == code and lines[0].startswith("msunmerged") and text.format(**world) in lines[0], \
        (done.returncode, lines[0])
    assert "secret" not in done.stderr
    assert servers_on(tmp_path / "state") == []  # whatever the command started is stopped


def test_version(tmp_path: Path) -> None:
    done = msunmerged("--version", env=cli_env(tmp_path))
    assert done.returncode == 0 and done.stdout.strip() == f"msunmerged {__version__}"
