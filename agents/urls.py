"""Page URLs of the agents app (placeholder home until the session views land)."""

from django.contrib.auth.decorators import login_required
from django.urls import path
from django.views.generic import TemplateView

app_name = "agents"

urlpatterns = [
    path("", login_required(TemplateView.as_view(template_name="base.html")), name="home"),
]
