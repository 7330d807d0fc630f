"""PerLoop: one object per running event loop (asyncio objects must not cross loops)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    """Holds the object of each event loop; entries of closed loops are dropped."""

    def __init__(self) -> None:
        self._by_loop: dict[int, tuple[asyncio.AbstractEventLoop, T]] = {}

    def get(self, create: Callable[[], T]) -> T:
        """The running loop's object, made with ``create`` on first use."""
        loop = asyncio.get_running_loop()
        entry = self._by_loop.get(id(loop))
        if entry is not None and entry[0] is loop:
            return entry[1]
        for key, (other, _) in list(self._by_loop.items()):
            if other.is_closed():
                del self._by_loop[key]
        made = create()
        self._by_loop[id(loop)] = (loop, made)
        return made
