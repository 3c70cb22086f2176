"""``python manage.py headgate_worker``: a headgate worker running this project's Django
tasks (``headgate.contrib.django.worker``). Exit codes as ``headgate worker``: 0 after a
graceful stop, 75 after a ``restart`` signal, 1 when a second SIGTERM cut the drain
short, 2 for configuration errors, 69 when the store is unavailable."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser

from headgate.core import InvalidInput, StoreUnavailable
from headgate.services.config import ConfigError
from headgate.worker.launcher import configure_logging

from ...worker import backend_worker

EXIT_CONFIG = 2
EXIT_UNAVAILABLE = 69


class Command(BaseCommand):
    help = "Run a headgate worker for the Django tasks of a HeadgateBackend."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default",
                            help="The TASKS alias to run (default: default).")
        parser.add_argument("--store", dest="store_url", default=None,
                            help="Store URL (default: OPTIONS['URL'] when it names a "
                                 "store, else HG_STORE/HG_SQLITE/HG_PG).")
        parser.add_argument("--queues", default=None,
                            help="Comma-separated queues (default: the backend's QUEUES).")
        parser.add_argument("--concurrency", type=int, default=10)
        parser.add_argument("--worker-id", default=None)
        parser.add_argument("--drain-ms", type=int, default=None)
        parser.add_argument("--log-level", default="INFO")
        parser.add_argument("--log-format", default="text", choices=["text", "json"])

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["log_level"], options["log_format"])
        queues = [q for q in (options["queues"] or "").split(",") if q] or None
        extra = {k: options[k] for k in ("worker_id", "drain_ms") if options[k] is not None}
        try:
            worker = backend_worker(options["backend"], store_url=options["store_url"],
                                    queues=queues, concurrency=options["concurrency"],
                                    **extra)
        except StoreUnavailable as exc:
            self.stderr.write(f"headgate: error: {exc}")
            sys.exit(EXIT_UNAVAILABLE)
        except (ConfigError, InvalidInput, ValueError) as exc:
            self._fail(str(exc))
        sys.exit(worker.run())

    def _fail(self, message: str) -> NoReturn:
        self.stderr.write(f"headgate: error: {message}")
        sys.exit(EXIT_CONFIG)
