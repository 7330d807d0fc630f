"""Page URLs of the agents app."""

from django.urls import path

from . import views

app_name = "agents"

urlpatterns = [
    path("", views.home, name="home"),
    path("sessions/new/", views.new_session, name="new_session"),
    path("sessions/<str:session_id>/", views.session_chat, name="session"),
    path("monitor/", views.monitor, name="monitor"),
    path("runs/<str:request_id>/", views.run_detail, name="run"),
]
