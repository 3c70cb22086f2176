"""Integrations with other libraries, each behind an optional extra: ``django``
(``headgate-queue[django]``) and ``otel`` (``headgate-queue[otel]``). Importing this
package imports none of them."""
