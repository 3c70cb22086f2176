"""Django's tasks framework on headgate (``pip install 'headgate-queue[django]'``).

Django 6 ships the framework as ``django.tasks`` (Python 3.12+); on Django 5.2 /
Python 3.11 the ``django-tasks`` backport (``django_tasks``) provides the same API. This
package works with whichever is installed, preferring Django's own.

settings.py::

    INSTALLED_APPS = [..., "headgate.contrib.django"]      # the headgate_worker command
    TASKS = {
        "default": {
            "BACKEND": "headgate.contrib.django.HeadgateBackend",
            "QUEUES": ["default", "emails"],                 # optional: allowed queue names
            "OPTIONS": {
                "URL": "postgresql://…",    # or sqlite:///…, or the server: http(s)://…
                # "TOKEN": "…",             # with an http(s) URL: a bearer token
                # "ENQUEUE_ON_COMMIT": True,
                # "MAX_ATTEMPTS": 1,
                # "MODULES": ["myproject.jobs"],   # task modules beyond <app>.tasks
            },
        }
    }

then ``python manage.py headgate_worker`` runs the tasks (see ``backend`` for how
statuses, priorities, queues, results and errors map).
"""

from .backend import HeadgateBackend

__all__ = ["HeadgateBackend"]
