"""The Django app configuration for the agents app."""

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Connects the receivers that close a user's sockets when their login ends, in
        # every process (manage.py changepassword and the admin included), not only in
        # those that have served a page.
        from .web import revocation  # noqa: F401
