from django.apps import AppConfig


class HeadgateConfig(AppConfig):
    """Listed in INSTALLED_APPS for its ``headgate_worker`` management command."""

    name = "headgate.contrib.django"
    label = "headgate_django"
    verbose_name = "headgate"
