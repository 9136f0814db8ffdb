"""The log in files as CMSWEB services keep it for their filebeat side-car: one file per UTC day,
`<log_dir>/ms-unmerged-<YYYYMMDD>-<host>.log` (WMCore's `<srv>-%Y%m%d-<hostname>.log` via rotatelogs); the
side-car reads `*<pod name>*.log`, and a pod's host name is its pod name."""
from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from typing import Optional

from MSUnmerged.config import ConfigError

PREFIX = "ms-unmerged"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def file_name(log_dir: str, host: str, ts: float) -> Path:
    """The day's log file of this host."""
    return Path(os.path.expanduser(log_dir)) / f"{PREFIX}-{time.strftime('%Y%m%d', time.gmtime(ts))}-{host}.log"


class DailyFileHandler(logging.FileHandler):
    """Appends to the current UTC day's file; the first record of a new day opens the next one."""

    def __init__(self, log_dir: str, host: Optional[str] = None) -> None:
        self.log_dir, self.host = log_dir, host or socket.gethostname().split(".")[0]
        path = file_name(log_dir, self.host, time.time())
        path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(path, encoding="utf-8")

    def emit(self, record: logging.LogRecord) -> None:
        path = file_name(self.log_dir, self.host, record.created)
        if str(path) != self.baseFilename:
            self.acquire()
            try:
                self.close()
                self.baseFilename = str(path)
                self.stream = self._open()
            finally:
                self.release()
        super().emit(record)


def add_file_log(log_dir: str, level: int | str) -> Optional[DailyFileHandler]:
    """Also log to the day's file under `log_dir` (service.log_dir); nothing when it is empty."""
    if not log_dir:
        return None
    try:
        handler = DailyFileHandler(log_dir)
    except OSError as exc:
        raise ConfigError("service.log_dir", f"cannot write a log file there: {exc.strerror}") from None
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(level)
    logging.getLogger().addHandler(handler)
    return handler
