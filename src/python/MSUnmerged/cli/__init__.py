"""The `msunmerged` command line: one sub-command per module in this package."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Optional, Sequence

from MSUnmerged.config import ConfigError, load_config

# Exit codes, documented in the README.
EXIT_OK = 0
EXIT_FAILED = 1  # internal error
EXIT_GUARD = 2  # a guard refused: nothing will be deleted
EXIT_BAD_INPUT = 3  # unusable input or configuration
EXIT_AUTH = 4  # a batch system or source refused our credentials (token, certificate, proxy)
# RunResult reasons of a refused credential: the operator renews it, nothing else helps.
AUTH_REASONS = ("backend_auth_refused", "backend_auth_denied", "backend_credential_missing")


def failed_code(reason: str) -> int:
    """The exit code of a command whose RSE run failed with this RunResult reason."""
    if reason in AUTH_REASONS or reason.endswith("_authentication"):
        return EXIT_AUTH
    return EXIT_FAILED

# Each module defines `register(subparsers)` and sets a `run(args, config) -> int` default.
COMMANDS = ["plan", "demo", "serve", "status", "jobs", "files", "apply", "run", "clean"]


class BadInput(Exception):
    """Input a command cannot use; the message says which and why."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="msunmerged", description="Clean /store/unmerged at CMS sites.")
    parser.add_argument("--config", help="TOML configuration file (default: etc/msunmerged.toml or $MSUNMERGED_CONFIG)")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING (default from config)")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"MSUnmerged.cli.{name}").register(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"msunmerged: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    logging.basicConfig(level=(args.log_level or config.service.log_level).upper(), force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int(args.run(args, config))
    except BadInput as exc:
        print(f"msunmerged {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
