"""InMemoryMessageAccumulator, re-exported: it lives in the runtime, which makes it the default."""

from ..runtime.memory import InMemoryMessageAccumulator

__all__ = ["InMemoryMessageAccumulator"]
