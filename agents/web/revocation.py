"""Ending a user's open sockets when their login ends: logout, a new password, deactivation.

A socket keeps the user it was opened with, so without this a chat page opened before a
logout could still send messages that start runs. Each socket joins two groups: one for its
login (the session key: logging out ends only that browser's sockets) and one for its user
(a password change or deactivation ends them all). The channel layer reaches every process.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import pre_save
from django.dispatch import receiver

log = logging.getLogger(__name__)

REVOKED = "auth.revoked"  # the group message type; consumers handle it as auth_revoked


def user_group(user_id: Any) -> str:
    return f"auth.user.{user_id}"


def login_group(session_key: str) -> str:
    # Hashed: a group name is visible to every process on the layer; a session key is a secret.
    return "auth.login." + hashlib.sha256(session_key.encode()).hexdigest()[:32]


def groups_for(scope: dict[str, Any]) -> list[str]:
    """The revocation groups a socket with this scope joins."""
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return []
    groups = [user_group(user.pk)]
    session = scope.get("session")
    key = getattr(session, "session_key", None)
    if key:
        groups.append(login_group(key))
    return groups


def revoke(group: str) -> None:
    """Tell every socket in the group to close (from sync code: views, signals, the admin)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": REVOKED}
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    try:
        if loop is not None:  # called on an event loop thread: do not block it
            loop.create_task(layer.group_send(group, message))
        else:
            async_to_sync(layer.group_send)(group, message)
    except Exception as exc:  # the layer is away: those sockets close on their next check
        log.warning("could not close the sockets of %s: %s", group, exc)


@receiver(user_logged_out, dispatch_uid="zett-revoke-on-logout")
def _on_logout(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        revoke(login_group(key))
    elif user is not None:
        revoke(user_group(user.pk))


@receiver(pre_save, sender=get_user_model(), dispatch_uid="zett-revoke-on-credentials")
def _on_user_saved(sender: Any, instance: Any, **kwargs: Any) -> None:
    fields = kwargs.get("update_fields")
    if instance.pk is None or kwargs.get("raw"):
        return
    if fields is not None and not {"password", "is_active"} & set(fields):
        return  # e.g. login's last_login update
    before = sender.objects.filter(pk=instance.pk).values("password", "is_active").first()
    if before is None:
        return
    if before["password"] != instance.password or (before["is_active"] and not instance.is_active):
        user_id = instance.pk
        transaction.on_commit(lambda: revoke(user_group(user_id)))
