"""Operator protocols: what an extension lets people do to a run, and what a run waits for.

An extension declares them as data, so a host can route actions and show waits without
knowing the extension: ``operator_actions`` (a browser action becomes one ExternalEvent) and
``operator_waits`` (CUSTOM events that open and close an entry of what the run waits for).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .events import ExternalEvent


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One operator action and the ExternalEvent it becomes.

    ``fields`` maps keys of the action's payload to keys of the event's data, ``constants``
    adds fixed data (``{"decision": "approve"}``), and ``by`` names the data key that
    receives who acted (None: not recorded).
    """

    action: str
    event: str
    fields: Mapping[str, str] = field(default_factory=dict)
    constants: Mapping[str, Any] = field(default_factory=dict)
    by: str | None = "by"
    correlation: str | None = "id"  # payload key naming the wait it answers, if any

    def event_for(self, payload: Mapping[str, Any], by: str) -> ExternalEvent:
        # An empty field counts as not given.
        data: dict[str, Any] = {
            target: payload.get(source) if payload.get(source) != "" else None
            for source, target in self.fields.items()
        }
        data.update(self.constants)
        if self.by is not None:
            data[self.by] = by
        return ExternalEvent(self.event, data)


@dataclass(frozen=True, slots=True)
class WaitSpec:
    """A wait the run opens with one CUSTOM event and closes with others.

    The open wait is shown as ``{"kind": kind, "id": <correlation>, <fields>...}``.
    """

    kind: str
    opened_by: str
    closed_by: frozenset[str]
    fields: tuple[str, ...] = ()
    correlation: str = "id"

    def entry(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": data.get(self.correlation),
            **{name: data.get(name) for name in self.fields},
        }


@dataclass(frozen=True, slots=True)
class OperatorProtocol:
    """The actions and waits of a set of extensions, looked up by name."""

    actions: Mapping[str, ActionSpec]
    waits: tuple[WaitSpec, ...]

    def action(self, name: str) -> ActionSpec | None:
        return self.actions.get(name)

    def apply_wait(self, waiting: list[dict[str, Any]], name: str, data: Mapping[str, Any]) -> bool:
        """Open or close an entry of ``waiting`` for a CUSTOM event; False when none matches."""
        for spec in self.waits:
            if name == spec.opened_by:
                waiting.append(spec.entry(data))
                return True
            if name in spec.closed_by:
                correlation = data.get(spec.correlation)
                waiting[:] = [w for w in waiting if w.get("id") != correlation]
                return True
        return False


def operator_protocol(extensions: Iterable[Any]) -> OperatorProtocol:
    """Collect ``operator_actions`` and ``operator_waits`` from extensions, first one wins."""
    actions: dict[str, ActionSpec] = {}
    waits: list[WaitSpec] = []
    for extension in extensions:
        for spec in getattr(extension, "operator_actions", ()):
            actions.setdefault(spec.action, spec)
        waits.extend(getattr(extension, "operator_waits", ()))
    return OperatorProtocol(actions, tuple(waits))


__all__ = ["ActionSpec", "OperatorProtocol", "WaitSpec", "operator_protocol"]
