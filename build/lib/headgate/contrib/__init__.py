"""Integrations with other libraries, each behind an optional extra: ``django``
(``headgate[django]``) and ``otel`` (``headgate[otel]``). Importing this package imports
none of them."""
