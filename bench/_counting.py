"""W1's hook counter for both sides: it imports neither runtime, so the peer venv runs it."""

from __future__ import annotations

import functools
import inspect
from contextlib import aclosing
from typing import Any


def counting_extension(base: type, hooks: tuple[str, ...], counts: dict[str, int]) -> type:
    """A subclass of `base` whose hooks count their calls (for the equivalence check)."""

    def wrap(hook: str) -> Any:
        inner = getattr(base, hook)
        if inspect.isasyncgenfunction(inner):

            @functools.wraps(inner)
            async def stream_wrapper(self: Any, *args: Any) -> Any:
                counts[hook] = counts.get(hook, 0) + 1
                async with aclosing(inner(self, *args)) as events:
                    async for event in events:
                        yield event

            return stream_wrapper

        @functools.wraps(inner)
        async def wrapper(self: Any, *args: Any) -> Any:
            counts[hook] = counts.get(hook, 0) + 1
            return await inner(self, *args)

        return wrapper

    return type("CountingNoOp", (base,), {hook: wrap(hook) for hook in hooks})
