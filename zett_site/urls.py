"""The site's URL map: admin, login/logout, and the agents app at the root."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from agents.observability.views import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    # LogoutView only accepts POST (Django 5), so a link or prefetch cannot log anyone out.
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("metrics", metrics, name="metrics"),
    path("", include("agents.web.urls")),
]
