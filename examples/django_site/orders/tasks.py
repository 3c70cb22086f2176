"""The example's tasks: Django's @task, run by `manage.py headgate_worker`."""

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

from .models import Order


@task(queue_name="orders", priority=10)
def ship(order_id: int) -> dict:
    order = Order.objects.get(pk=order_id)
    order.shipped = True
    order.save(update_fields=["shipped"])
    return {"order": order.pk, "customer": order.customer}


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def add_later(a: int, b: int) -> int:
    return a + b


@task(takes_context=True)
def which_attempt(context) -> int:
    return context.attempt


@task
def refuse(reason: str) -> None:
    raise ValueError(reason)
