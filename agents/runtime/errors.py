"""Errors the runtime raises when its contract is broken."""

from __future__ import annotations


class AgentProtocolError(RuntimeError):
    """A caller, model or extension used the runtime against its contract.

    Examples: a second concurrent request on one session, a model stream without
    exactly one completed response, an extension emitting a runtime-owned event
    type, or more model calls than ``max_iterations`` allows for one input.
    """


class ModelCallError(Exception):
    """An expected failure of a model call (the provider refused, timed out or broke off).

    ``str(error)`` is a message a person can act on; hosts show it without a traceback.
    Providers raise subclasses of it.
    """


class MaxIterationsExceeded(AgentProtocolError):
    """The model kept calling tools past the Agent's max_iterations for one input."""
