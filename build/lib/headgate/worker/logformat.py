"""The log formats of ``headgate serve``, ``worker`` and ``demo``: ``text`` (one line:
time, level, logger, message) or ``json`` (one JSON object per line, for log
shippers). Chosen by ``--log-format`` / ``HG_LOG_FORMAT``; the level by ``--log-level`` /
``HG_LOG_LEVEL``.

A JSON line has ``time`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``; inside
a job's attempt also ``job_id``, ``kind``, ``queue``, ``attempt`` and ``worker_id`` as
fields of their own (``observe.attempt_fields``); an exception adds ``exc_type`` and
``exc_text``; values given with ``extra=`` are kept as fields too.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from .observe import attempt_fields

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("text", "json")
ATTEMPT_KEYS = ("job_id", "kind", "queue", "attempt", "worker_id")
# LogRecord's own attributes: everything else on a record came from extra=.
_RECORD_KEYS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class AttemptFields(logging.Filter):
    """Copies the running attempt's fields onto each record (keeps ones set by extra=)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = attempt_fields()
        if fields:
            for key, value in fields.items():
                if not hasattr(record, key):
                    setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_KEYS and not key.startswith("_"):
                line[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            line["exc_type"] = record.exc_info[0].__name__
            line["exc_text"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Root logging to stderr in ``fmt`` at ``level`` (replacing earlier handlers)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(AttemptFields())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


__all__ = ["ATTEMPT_KEYS", "FORMATS", "AttemptFields", "JsonFormatter", "configure_logging"]
