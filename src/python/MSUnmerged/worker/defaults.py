"""Default settings of a cleanup job: the one place that defines them.

The worker uses them for a setting its manifest leaves out; the service's configuration (config.JobsConfig) and
the job spec (jobs/spec.py) take theirs from here. Standard library only: the worker ships alone.
"""
from __future__ import annotations

# The DeleteFiles step: the configuration's jobs.<key> (all but BACKOFF_S), the worker's when the manifest has none.
FILE_TIMEOUT_S = 120.0  # one storage operation on one path
RETRIES = 2  # a transient failure is tried again this many times (the service: in this many later jobs)
BACKOFF_S = 1.0  # the wait before a retry, doubled at each
MAX_CONSECUTIVE_DENIED = 20  # the worker stops after this many permission refusals in a row
MAX_OPS_PER_S = 0.0  # storage operations per second of one job (0: unpaced)
LOOK_BEFORE_DELETE = True  # each file is looked at before it is deleted
# jobs.max_protection_age_s, and a step made without make_job's: how long after its protected list was fetched a
# job may delete. The worker has no default for it: a manifest without `protected_until` is refused.
MAX_PROTECTION_AGE_S = 4 * 3600.0

# What a job asks of the batch system (jobs.request_memory_mb, request_disk_mb, max_runtime_s).
MEMORY_MB = 500
DISK_MB = 500
RUNTIME_S = 4 * 3600
