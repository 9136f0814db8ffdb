"""The service's runner and batch system as the benchmarks reach them, in this checkout's code and in older
checkouts' (`--before`): before issue 28's seam, `Service` was its own runner and forwarded `backend`."""
from __future__ import annotations

from typing import Any


def runner_of(service: Any) -> Any:
    """What runs one RSE (`run_once`, `apply_plan`, `hook`)."""
    return getattr(service, "runner", service)


def backend_of(service: Any) -> Any:
    """The batch system the service submits to."""
    runner = runner_of(service)
    return runner.jobs.backend if hasattr(runner, "jobs") else runner.backend
