"""Who may see and act on a chat session: its owner, and staff operators."""

from __future__ import annotations

from typing import Any


def may_use_session(user: Any, owner_id: int | None) -> bool:
    """True for the session's owner and for staff; False for anonymous and everyone else."""
    if user is None or not user.is_authenticated:
        return False
    return bool(user.is_staff) or (owner_id is not None and owner_id == user.pk)
