"""The extension catalog: catalog key -> extension class, settings model and description.

Built-in extensions are registered here; further ones come from the
``ZETT_EXTENSIONS`` setting (dotted paths). ``build_agent_for_profile`` turns a
profile and its ExtensionSetting rows into a runtime Agent, validating every
setting with the extension's pydantic model, and raises ProfileConfigError
with a message naming the bad field otherwise.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic
from django.conf import settings as django_settings
from django.utils.module_loading import import_string

from ..budgets import BUDGET_KEY, DatabaseLedger
from ..extensions.approval import ToolApprovalExtension
from ..extensions.ask_user import AskUserExtension
from ..extensions.budget import BudgetExtension, BudgetSettings
from ..extensions.demo_tools import DemoToolsExtension
from ..extensions.settings import (
    AskUserSettings,
    SteeringSettings,
    SummaryCompactionSettings,
    ToolApprovalSettings,
)
from ..extensions.steering import SteeringExtension
from ..extensions.summary_compaction import SummaryCompactionExtension
from ..extensions.tracer_provider import configure_from_environment
from ..extensions.tracing import TracingExtension, TracingSettings
from ..runtime import Agent, AgentExtension
from ..runtime.extension import HOOK_NAMES, overrides, sort_by_priority
from ..runtime.tools import describe_validation
from ..session_store import DjangoSessionStore

STORE_KEY = "session_store"
TRACING_KEY = TracingExtension.catalog_key


class ProfileConfigError(ValueError):
    """A profile's provider or extensions cannot be built; the message says which and why."""


class _NoSettings(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


class DemoToolsSettings(pydantic.BaseModel):
    """Which demo tools to offer."""

    model_config = pydantic.ConfigDict(extra="forbid")
    tools: list[str] = pydantic.Field(
        default_factory=lambda: ["calculator", "clock"],
        description='Any of "calculator", "clock" and "wait" (sleeps, for load tests).',
    )

    @pydantic.field_validator("tools")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - {"calculator", "clock", "wait"})
        if unknown:
            raise ValueError(f"unknown demo tools: {', '.join(unknown)}")
        return value


@dataclass(frozen=True, slots=True)
class ExtensionSpec:
    """One catalog entry."""

    key: str
    label: str
    description: str
    factory: Callable[[Any], AgentExtension]  # called with the validated settings model
    settings_model: type[pydantic.BaseModel] = _NoSettings
    required: bool = False  # added to every profile even when not configured

    def validate(self, raw: Mapping[str, Any] | None) -> pydantic.BaseModel:
        """The validated settings, or ProfileConfigError naming each bad field."""
        if raw is not None and not isinstance(raw, Mapping):
            raise ProfileConfigError(f"{self.key}: settings must be a JSON object")
        try:
            return self.settings_model.model_validate(dict(raw or {}))
        except pydantic.ValidationError as exc:
            raise ProfileConfigError(f"{self.key}: {describe_validation(exc)}") from None

    def defaults(self) -> dict[str, Any]:
        return self.settings_model().model_dump(mode="json")

    def build(self, raw: Mapping[str, Any] | None) -> AgentExtension:
        validated = self.validate(raw)
        try:
            extension = self.factory(validated)
        except (TypeError, ValueError) as exc:
            raise ProfileConfigError(f"{self.key}: {exc}") from None
        if not isinstance(extension, AgentExtension):
            raise ProfileConfigError(f"{self.key}: the factory did not return an AgentExtension")
        return extension


def _with_settings(cls: type[AgentExtension]) -> Callable[[Any], AgentExtension]:
    return lambda validated: cls(validated)  # type: ignore[call-arg]


BUILTIN_EXTENSIONS: tuple[ExtensionSpec, ...] = (
    ExtensionSpec(
        key=STORE_KEY,
        label="Session store",
        description="Restores history from the database and stores every message as it is "
        "appended. Always present: the database is the truth.",
        factory=lambda _validated: DjangoSessionStore(),
        required=True,
    ),
    ExtensionSpec(
        key="demo_tools",
        label="Demo tools",
        description="Offers the calculator and clock tools the offline demo model uses.",
        factory=lambda validated: DemoToolsExtension(tuple(validated.tools)),
        settings_model=DemoToolsSettings,
    ),
    ExtensionSpec(
        key="tool_approval",
        label="Tool approval",
        description="Tool calls matching the patterns wait for an operator to approve or deny "
        "them; a timeout is recorded as a timeout.",
        factory=_with_settings(ToolApprovalExtension),
        settings_model=ToolApprovalSettings,
    ),
    ExtensionSpec(
        key="ask_user",
        label="Ask the user",
        description="Registers an ask_user tool: the question appears in the chat and the "
        "monitor, and the answer resumes the run.",
        factory=_with_settings(AskUserExtension),
        settings_model=AskUserSettings,
    ),
    ExtensionSpec(
        key="steering",
        label="Steering",
        description="A message sent while a run is active is taken at the next safe point.",
        factory=_with_settings(SteeringExtension),
        settings_model=SteeringSettings,
    ),
    ExtensionSpec(
        key="summary_compaction",
        label="Summary compaction",
        description="Replaces the older turns of a conversation by a model-written summary "
        "when it crosses a size threshold; the latest turns stay verbatim.",
        factory=lambda validated: _summary_compaction(validated),
        settings_model=SummaryCompactionSettings,
    ),
    ExtensionSpec(
        key=BUDGET_KEY,
        label="Budgets",
        description="Stops a run when its next model call cannot fit a budget (the profile's "
        "tokens and cost per run, its daily cost cap, the user's daily and monthly caps), "
        "or mid-answer when the live estimate crosses one; the run ends as budget_exceeded.",
        factory=lambda validated: BudgetExtension(validated, ledger=DatabaseLedger()),
        settings_model=BudgetSettings,
    ),
    ExtensionSpec(
        key=TRACING_KEY,
        label="Tracing",
        description="OpenTelemetry spans of every run (invoke_agent, chat, execute_tool). "
        "Added to every profile when OTEL_EXPORTER_OTLP_ENDPOINT is set; a disabled row "
        "turns it off for one profile.",
        factory=lambda validated: TracingExtension(
            validated,
            tracer_provider=configure_from_environment() if _tracing_on() else None,
        ),
        settings_model=TracingSettings,
    ),
)


def _summary_compaction(settings: SummaryCompactionSettings) -> SummaryCompactionExtension:
    """The extension with its own summary model when provider is set, else the run's."""
    model = None
    if settings.provider:
        model = build_model(settings.provider, settings.model or "", None)
    return SummaryCompactionExtension(settings, model=model)


def _tracing_on() -> bool:
    return bool(getattr(django_settings, "ZETT_TRACING", False))


def _spec_from_object(path: str, obj: Any) -> ExtensionSpec:
    if isinstance(obj, ExtensionSpec):
        return obj
    if inspect.isclass(obj) and issubclass(obj, AgentExtension):
        settings_model = getattr(obj, "Settings", None) or _NoSettings
        if not (inspect.isclass(settings_model) and issubclass(settings_model, pydantic.BaseModel)):
            raise ProfileConfigError(f"{path}: Settings must be a pydantic model")
        takes_settings = settings_model is not _NoSettings

        def factory(validated: Any, cls: type[AgentExtension] = obj) -> AgentExtension:
            return cls(validated) if takes_settings else cls()  # type: ignore[call-arg]

        doc = inspect.getdoc(obj) or ""
        return ExtensionSpec(
            key=getattr(obj, "catalog_key", None) or obj.__name__,
            label=getattr(obj, "catalog_label", None) or obj.__name__,
            description=doc.split("\n\n")[0],
            factory=factory,
            settings_model=settings_model,
        )
    raise ProfileConfigError(f"{path} is neither an ExtensionSpec nor an AgentExtension subclass")


@functools.cache
def _configured(paths: tuple[str, ...]) -> dict[str, ExtensionSpec]:
    specs = {spec.key: spec for spec in BUILTIN_EXTENSIONS}
    for path in paths:
        try:
            obj = import_string(path)
        except ImportError as exc:
            raise ProfileConfigError(f"ZETT_EXTENSIONS: cannot import {path}: {exc}") from None
        spec = _spec_from_object(path, obj)
        if spec.key in specs:
            raise ProfileConfigError(f"ZETT_EXTENSIONS: the key {spec.key!r} of {path} is taken")
        specs[spec.key] = spec
    return specs


def extension_catalog() -> dict[str, ExtensionSpec]:
    """Every known extension by key: the built-ins, then those of ZETT_EXTENSIONS."""
    return _configured(tuple(getattr(django_settings, "ZETT_EXTENSIONS", ()) or ()))


@dataclass(frozen=True, slots=True)
class ExtensionRow:
    """The parts of an ExtensionSetting the catalog needs (a row or a form's cleaned data)."""

    key: str
    instance_name: str = ""
    enabled: bool = True
    priority: int = 100
    settings: Mapping[str, Any] | None = None


def _as_row(row: Any) -> ExtensionRow:
    if isinstance(row, ExtensionRow):
        return row
    if isinstance(row, tuple):
        return ExtensionRow(*row)
    return ExtensionRow(row.key, row.instance_name, row.enabled, row.priority, row.settings)


def build_extensions(rows: Iterable[Any], *, persist: bool = True) -> list[AgentExtension]:
    """Extensions for a profile's rows, in registration order (the store added if absent).

    ``persist=False`` leaves the session store out, for a dry run that must not
    write (the admin's "test this profile").
    """
    catalog = extension_catalog()
    built: list[AgentExtension] = []
    names: dict[str, str] = {}
    configured = [_as_row(row) for row in rows]
    if not any(row.key == STORE_KEY for row in configured):
        configured.insert(0, ExtensionRow(STORE_KEY, priority=10))
    if _tracing_on() and not any(row.key == TRACING_KEY for row in configured):
        content = bool(getattr(django_settings, "ZETT_TRACE_CONTENT", False))
        configured.insert(
            0, ExtensionRow(TRACING_KEY, priority=0, settings={"capture_content": content})
        )
    for row in configured:
        if row.key == STORE_KEY and not persist:
            continue
        spec = catalog.get(row.key)
        if spec is None:
            raise ProfileConfigError(f"unknown extension {row.key!r}")
        if not row.enabled:
            if spec.required:
                raise ProfileConfigError(f"{row.key} is required and cannot be disabled")
            spec.validate(row.settings)  # a disabled row must still be valid to be saved
            continue
        extension = spec.build(row.settings)
        if row.instance_name:
            extension.name = row.instance_name
        extension.priority = int(row.priority)  # type: ignore[misc]
        if extension.name in names:
            raise ProfileConfigError(
                f"two extensions are named {extension.name!r} ({names[extension.name]} and "
                f"{row.key}); give one an instance name"
            )
        names[extension.name] = row.key
        built.append(extension)
    return built


def build_model(provider: str, model_name: str, provider_settings: Mapping[str, Any] | None) -> Any:
    from ..providers.registry import build_model as registry_build

    try:
        return registry_build(provider, model_name, dict(provider_settings or {}))
    except ValueError as exc:
        raise ProfileConfigError(str(exc)) from None


def build_agent_for_profile(profile: Any, rows: Iterable[Any], *, persist: bool = True) -> Agent:
    """A runtime Agent for a profile and its extension rows (ProfileConfigError if not)."""
    extensions = build_extensions(rows, persist=persist)
    for extension in extensions:
        if isinstance(extension, TracingExtension):
            extension.describe(
                agent_name=profile.name, provider=profile.provider, model=profile.model_name
            )
    model = build_model(profile.provider, profile.model_name, profile.provider_settings)
    try:
        return Agent(
            model,
            system_prompt=profile.system_prompt,
            extensions=extensions,
            max_iterations=profile.max_iterations,
        )
    except (TypeError, ValueError) as exc:
        raise ProfileConfigError(str(exc)) from None


def hook_order(extensions: Sequence[AgentExtension]) -> dict[str, list[str]]:
    """For each hook, the names of the extensions that run it, in the order they run."""
    ordered = sort_by_priority(list(extensions))
    return {hook: [ext.name for ext in ordered if overrides(ext, hook)] for hook in HOOK_NAMES}
