"""Page URLs of the agents app."""

from django.urls import path

# revocation connects its signal receivers. It is imported with the first request of every
# process that serves pages, so a logout, a password change or a deactivation there closes
# the user's sockets on every process.
from . import chats, revocation, views  # noqa: F401
from .usage import views as usage

app_name = "agents"

urlpatterns = [
    path("", views.home, name="home"),
    path("sessions/new/", views.new_session, name="new_session"),
    path("sessions/<str:session_id>/", views.session_chat, name="session"),
    path("sessions/<str:session_id>/rename/", chats.rename, name="rename_session"),
    path("sessions/<str:session_id>/delete/", chats.delete, name="delete_session"),
    path("sessions/<str:session_id>/pin/", chats.pin, name="pin_session"),
    path("sessions/<str:session_id>/archive/", chats.archive, name="archive_session"),
    path("monitor/", views.monitor, name="monitor"),
    path("runs/<str:request_id>/", views.run_detail, name="run"),
    path("usage/", usage.usage_page, name="usage"),
    path("usage/csv/", usage.usage_csv, name="usage_csv"),
]
