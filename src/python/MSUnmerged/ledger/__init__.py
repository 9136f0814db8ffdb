"""The MongoDB ledger: buckets and rows of files, jobs, RSE states, cycles and leases (see docs/ledger.md)."""
from MSUnmerged.ledger.connect import client_options, open_client
from MSUnmerged.ledger.leases import LeaseLost, Leases
from MSUnmerged.ledger.retry import LedgerError, with_retry
from MSUnmerged.ledger.states import (LIVE_JOB_STATES, NOT_DELETED, OUTCOME_STATES, RETRIABLE, SUBMITTED, DirState,
                                      FileState)
from MSUnmerged.ledger.store import Ledger
from MSUnmerged.worker.ids import file_id, gen_key, job_id

__all__ = ["LIVE_JOB_STATES", "NOT_DELETED", "OUTCOME_STATES", "RETRIABLE", "SUBMITTED", "DirState", "FileState",
           "LeaseLost", "Leases", "Ledger", "LedgerError", "client_options", "file_id", "gen_key", "job_id",
           "open_client", "with_retry"]
