"""`msunmerged serve`: the polling loop, operator triggers and the REST API / operator page in one process
(wiring.serve_private); here only its arguments are checked."""
from __future__ import annotations

import argparse
import socket

from MSUnmerged.cli import EXIT_OK, BadInput, port_number
from MSUnmerged.config import Config


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=port_number, default=None, help="listen port (default rest.port)")
    p.set_defaults(run=run, sigterm_code=EXIT_OK)  # SIGTERM is how Kubernetes stops it: a clean stop is a success


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as CherryPy binds
        try:
            s.bind((host, port))
            return False
        except OSError:
            return True


def run(args: argparse.Namespace, config: Config) -> int:
    """Serve until SIGTERM (EXIT_OK once stopped) or Ctrl-C (EXIT_INTERRUPTED): cli.main."""
    listen = config.rest.port if args.port is None else args.port
    # Checked before anything runs: on a busy port CherryPy ends the process at once (os._exit), which
    # would skip every clean-up, the embedded database's too.
    if port_in_use(config.rest.host, listen):
        raise BadInput(f"port {listen} on {config.rest.host} is in use (another msunmerged serve?): "
                       "choose another with --port or rest.port")
    from MSUnmerged.wiring import serve_private  # imports the live sources, backends and REST only when needed
    serve_private(config, port=args.port)
    return EXIT_OK
