"""The MongoDB ledger: files, jobs, RSE states, cycles and leases (see docs/ledger.md)."""
from MSUnmerged.ledger.connect import client_options, open_client
from MSUnmerged.ledger.leases import LeaseLost, Leases
from MSUnmerged.ledger.retry import LedgerError, with_retry
from MSUnmerged.ledger.store import (DELETED, FAILED, FILE_STATES, JOB_PLANNED, LIVE_JOB_STATES, MISSING,
                                     OUTCOME_STATES, PLANNED, RETRIABLE, SKIPPED_PROTECTED, UNKNOWN,
                                     WOULD_DELETE, Ledger, file_id, gen_key, job_id)

__all__ = ["DELETED", "FAILED", "FILE_STATES", "JOB_PLANNED", "LIVE_JOB_STATES", "MISSING", "OUTCOME_STATES",
           "PLANNED", "RETRIABLE", "SKIPPED_PROTECTED", "UNKNOWN", "WOULD_DELETE", "LeaseLost", "Leases", "Ledger",
           "LedgerError", "client_options", "file_id", "gen_key", "job_id", "open_client", "with_retry"]
