"""Entry point of the site-side worker: `python3 msunmerged-worker.pyz MANIFEST [--report FILE]`.

Exit codes: 0 all done, 1 partial, 2 refused (nothing touched), 3 configuration error (nothing
touched), 4 internal error, 5 storage credential missing, expired or refused. The report (JSON lines)
says what happened to every file.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, NoReturn, Optional

from . import cleanup, manifest
from .ids import REPORT_NAME
from .report import ReportWriter


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="msunmerged-worker", description="Delete the files of one cleanup job.")
    parser.add_argument("manifest", help="job manifest (JSON)")
    parser.add_argument("--report", default=REPORT_NAME, help="report file to write (JSON lines)")
    parser.add_argument("--dry-run", action="store_true", help="delete nothing, whatever the manifest says")
    args = parser.parse_args(argv)
    try:
        report = ReportWriter.open(args.report)
    except OSError as exc:
        print("msunmerged-worker: cannot write report %s: %s" % (args.report, exc), file=sys.stderr)
        return cleanup.EXIT_CONFIG
    try:
        try:
            job = manifest.read_manifest(args.manifest)
        except manifest.JobRefused as exc:
            return cleanup.refuse_unreadable(report, str(exc))
        return cleanup.Cleanup(job, report, dict(os.environ), force_dry_run=args.dry_run).run()
    except Exception as exc:  # the report must still end with a summary saying so
        return cleanup.internal_error(report, exc)
    finally:
        report.close()


def run_and_exit() -> NoReturn:
    """Run the job and end the process with its exit code, skipping the interpreter's finalisation.

    The report is closed by then. What finalisation would still run belongs to the site's C libraries: the
    gfal2 module's XrdCl tears its threads down at exit and can abort there (SIGABRT, seen on a job whose
    report had ended with exit code 0), which the batch system would show as a crashed job."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run_and_exit()
