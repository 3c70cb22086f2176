"""WSGI entry point (``gunicorn app:app``, ``flask --app app run``).

The store opens on the first request that needs it, so importing this is cheap.
"""

from headgate.web import create_app

app = create_app()
