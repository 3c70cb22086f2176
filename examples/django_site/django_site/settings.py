"""A minimal Django project whose tasks run on headgate.

Django's own database is SQLite (EXAMPLE_DB, default db.sqlite3 here); headgate's store
is HG_EXAMPLE_STORE (default sqlite:///jobs.db), or a headgate server's URL
(http://host:8080, with HG_EXAMPLE_TOKEN) for a site that has no access to it.
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "headgate.contrib.django",
    "orders",
]
try:  # Django 5.2 on Python 3.11: the backport is an app too (its system checks)
    import django_tasks  # noqa: F401

    INSTALLED_APPS.append("django_tasks")
except ImportError:
    pass

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("EXAMPLE_DB", str(BASE_DIR / "db.sqlite3")),
    }
}

TASKS = {
    "default": {
        "BACKEND": "headgate.contrib.django.HeadgateBackend",
        "QUEUES": ["default", "orders"],
        "OPTIONS": {
            "URL": os.environ.get("HG_EXAMPLE_STORE", "sqlite:///jobs.db"),
            "TOKEN": os.environ.get("HG_EXAMPLE_TOKEN") or None,
            "ENQUEUE_ON_COMMIT": True,
        },
    }
}
