"""The `msunmerged` command line: one sub-command per module in this package."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import select
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, Optional, Sequence

from MSUnmerged import __version__
from MSUnmerged.redact import redact, redact_logs

if TYPE_CHECKING:
    from MSUnmerged.sources.errors import SourceError

log = logging.getLogger("MSUnmerged.cli")

# Exit codes, documented in the README.
EXIT_OK = 0
EXIT_FAILED = 1  # an internal error, or the RSE could not be worked (the reason is printed)
EXIT_GUARD = 2  # a guard refused: nothing will be deleted
EXIT_BAD_INPUT = 3  # unusable input or configuration
EXIT_AUTH = 4  # a batch system or source refused our credentials (token, certificate, proxy)
EXIT_UNAVAILABLE = 5  # an outside service (ledger database, ConMon, WMStats, Rucio) failed or did not answer
EXIT_USAGE = 64  # the command line itself is wrong (EX_USAGE; argparse's own 2 means "a guard refused" here)
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141  # standard output's reader went away (128 + SIGPIPE, as `yes | head` ends)
# RunResult reasons of a refused credential: the operator renews it, nothing else helps.
AUTH_REASONS = ("backend_auth_refused", "backend_auth_denied", "backend_credential_missing",
                "backend_credential_expired")


def failed_code(reason: str) -> int:
    """The exit code of a command whose RSE run failed with this RunResult reason."""
    if reason in AUTH_REASONS or reason.endswith("_authentication"):
        return EXIT_AUTH
    return EXIT_FAILED


def source_code(exc: SourceError) -> int:
    """A source that refused our certificate, proxy or token: EXIT_AUTH; any other failure: EXIT_UNAVAILABLE."""
    from MSUnmerged.sources.errors import AUTHENTICATION
    return EXIT_AUTH if exc.kind == AUTHENTICATION else EXIT_UNAVAILABLE


# The sub-commands and their one-line help. Each is a module of this package defining `register(parser)`,
# which adds its options and sets a `run(args, config) -> int` default. Only the module of the command
# given is imported (the others would cost most of a second of imports before anything happens).
COMMANDS = {
    "plan": "plan the cleanup of one RSE from a dump file (offline)",
    "demo": "run the service on a bundled sample site (no outside services)",
    "serve": "run the polling loop, triggers and the REST API / operator page",
    "status": "RSE states and counters from the ledger",
    "jobs": "cleanup jobs recorded in the ledger",
    "files": "per-file (or, with --dirs, per-directory) records from the ledger",
    "apply": "record and submit a sealed plan directory, re-checked against the protected list and the guards "
             "in force",
    "run": "work one RSE once (plan, record, submit, collect) under its lease",
    "clean": "plan one RSE now, show the plan, and work it with --apply or after confirmation",
    "check": "try each part a real instance needs (database, sources, batch backends, credentials, REST keys) and "
             "say what works and what is missing",
}


class BadInput(Exception):
    """Input a command cannot use; the message says which and why."""


class Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line and EXIT_USAGE (sub-command parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


# Argument types: a value of the wrong kind is a usage error (one line naming the option, EXIT_USAGE).

def port_number(text: str) -> int:
    """A TCP port, 1-65535."""
    value = _integer(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (1-65535)")
    return value


def at_least(minimum: int) -> Callable[[str], int]:
    """An integer of at least `minimum`."""
    def check(text: str) -> int:
        value = _integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value
    check.__name__ = f"integer >= {minimum}"  # argparse names the type in its messages
    return check


def not_a_directory(text: str) -> str:
    """A path that is a file (or a pipe, or not there yet: the command says so), not a folder."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    return text


def not_a_file(text: str) -> str:
    """A path that is a folder (or not there yet), not a file."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} exists and is not a folder")
    return text


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The parser; of the sub-commands only the one named in `argv` gets its options (and its imports)."""
    from MSUnmerged.config import LOG_LEVELS

    parser = Parser(prog="msunmerged", description="Clean /store/unmerged at CMS sites.")
    parser.add_argument("--version", action="version", version=f"msunmerged {__version__}")
    parser.add_argument("--config", help="TOML configuration file (default: etc/msunmerged.toml or $MSUNMERGED_CONFIG)")
    parser.add_argument("--log-level", default=None, type=str.upper, choices=LOG_LEVELS,
                        help="log level (default from service.log_level)")
    chosen = _command_named(parser, argv)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, help_line in COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_line, description=help_line)
        if name == chosen:
            importlib.import_module(f"MSUnmerged.cli.{name}").register(sub)
    return parser


def _command_named(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]]) -> Optional[str]:
    """The sub-command `argv` names (after the top-level options), or None."""
    known = argparse.ArgumentParser(add_help=False)
    for action in parser._actions:
        if action.option_strings and action.nargs is None:  # --config, --log-level: they take a value
            known.add_argument(*action.option_strings)
    _, rest = known.parse_known_args(sys.argv[1:] if argv is None else list(argv))
    return next((word for word in rest if not word.startswith("-")), None)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command; every expected failure is one line on stderr and a documented exit code.
    Ctrl-C (or SIGTERM) at any moment, imports included, ends it with one line and EXIT_INTERRUPTED (`serve`
    stopped by SIGTERM: EXIT_OK once it has stopped cleanly)."""
    try:
        with terminate_as_interrupt():
            return _main(argv)
    except KeyboardInterrupt:
        return fail("msunmerged", "interrupted", EXIT_INTERRUPTED)


def entry() -> NoReturn:
    """The `msunmerged` program (bin/msunmerged, the console script): main(), then the interpreter's own exit, where
    an interrupt (it may land in an atexit hook, pymongo's among them) ends the process at once with
    EXIT_INTERRUPTED instead of a traceback."""
    code = main()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _interrupted_at_exit)
    sys.exit(code)


def _interrupted_at_exit(signum: int, frame: Any) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    os.write(2, b"msunmerged: interrupted\n")
    os._exit(EXIT_INTERRUPTED)


def _main(argv: Optional[Sequence[str]]) -> int:
    try:
        args = build_parser(argv).parse_args(argv)
    except SystemExit as exc:  # usage errors, --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    from pymongo.errors import PyMongoError

    from MSUnmerged import logfiles
    from MSUnmerged.config import ConfigError, load_config
    from MSUnmerged.embedded_mongo import EmbeddedMongoError
    from MSUnmerged.ledger.connect import DatabaseUnreachable, first_error
    from MSUnmerged.sources.errors import SourceError

    name = f"msunmerged {args.command}"
    try:
        config = load_config(args.config)
        level = args.log_level or config.service.log_level.upper()
        logging.basicConfig(level=level, force=True, format=logfiles.FORMAT, stream=sys.stderr)
        logfiles.add_file_log(config.service.log_dir, level)
        for handler in logging.getLogger().handlers:  # every line written: no secret of a URL in it
            redact_logs(handler)
        code = int(args.run(args, config))
        sys.stdout.flush()  # here, where a reader that went away is seen, not at the interpreter's exit
        if _received:  # an interrupt a clean-up swallowed before it could be delivered again: it still ends the command
            raise Terminated if _received[-1] == signal.SIGTERM else KeyboardInterrupt
        return code
    except (BadInput, ConfigError) as exc:
        return fail(name, str(exc), EXIT_BAD_INPUT)
    except SourceError as exc:
        return fail(name, str(exc), source_code(exc))
    except (DatabaseUnreachable, EmbeddedMongoError) as exc:
        return fail(name, str(exc), EXIT_UNAVAILABLE)
    except PyMongoError as exc:
        return fail(name, f"ledger database: {first_error(exc)}", EXIT_UNAVAILABLE)
    except Terminated:  # SIGTERM: a command that stops cleanly on it (serve) says so
        code = getattr(args, "sigterm_code", EXIT_INTERRUPTED)
        return fail(name, "interrupted" if code == EXIT_INTERRUPTED else "stopped (SIGTERM)", code)
    except KeyboardInterrupt:
        return fail(name, "interrupted", EXIT_INTERRUPTED)
    except Exception as exc:  # a bug: one line here, the traceback with --log-level DEBUG
        if isinstance(exc, BrokenPipeError) and stdout_closed():
            return closed_stdout()
        log.debug("internal error", exc_info=True)
        return fail(name, f"internal error: {type(exc).__name__}: {exc} (--log-level DEBUG shows where)",
                    EXIT_FAILED)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C is so that every clean-up runs the same; `serve` ends EXIT_OK on it."""


_received: list[int] = []  # the signals received while terminate_as_interrupt is in force, in order


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM end the command as Ctrl-C does, so its clean-up runs (the embedded database is released,
    or stopped by its last user); `serve` too, its REST API and loop stopped first. SIGINT is taken also when the
    process started with it ignored (a script's background job). An interrupt is never raised where Python could
    only print it and carry on (a `__del__`, a weakref callback: pymongo's cursors, pools and clients have them):
    it is raised a moment later, outside (RETRY_S, on SIGALRM)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    del _received[:]
    previous = {signum: signal.signal(signum, _interrupt) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    hook, sys.unraisablehook = sys.unraisablehook, _lost_interrupt
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.unraisablehook = hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)


RETRY_S = 0.005  # an interrupt that came in a clean-up is raised again this much later


def _interrupt(signum: int, frame: Any) -> None:
    if signum != signal.SIGALRM:
        _received.append(signum)
    elif not _received:
        return
    if _in_cleanup(frame):
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
        return
    raise Terminated if _received[-1] == signal.SIGTERM else KeyboardInterrupt


def _in_cleanup(frame: Any) -> bool:
    """The frame is in a `__del__` (whose exception Python only prints) or in our own unraisablehook."""
    while frame is not None:
        if frame.f_code.co_name == "__del__" or frame.f_code is _lost_interrupt.__code__:
            return True
        frame = frame.f_back
    return False


def _lost_interrupt(unraisable: Any) -> None:
    """sys.unraisablehook: an interrupt raised where Python can only print it (a weakref callback, an atexit hook)
    is raised again a moment later; anything else is printed as Python does."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
        return
    sys.__unraisablehook__(unraisable)


def stdout_closed() -> bool:
    """Standard output is a pipe (or socket) nobody reads any more."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):  # no file descriptor (a test's replacement), or it is closed
        return False


def closed_stdout() -> int:
    """Standard output's reader went away (`msunmerged files --json | head`): end quietly, as a program that
    SIGPIPE ends would, with EXIT_PIPE. Standard output is pointed at /dev/null first, or the interpreter's final
    flush would fail once more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE


def fail(name: str, message: str, code: int) -> int:
    print(f"{name}: {redact(message)}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
