"""The provider catalog: each model provider's key, settings model and factory (no Django).

``build_model(key, model_name, settings)`` validates a profile's provider settings (a JSON
object from the database or the admin) against the provider's pydantic model and builds the
AgentModel. The SDK-backed adapters are imported only when one is built, so importing the
catalog never imports a provider SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self

import pydantic
from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator

from ..runtime.model import AgentModel
from ..runtime.tools import describe_validation
from .time_limits import DEFAULT_DEADLINE, check_limits

# The names environment variables may have in a shell (and nothing that could be a key).
ENV_VAR_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


_TIMEOUT_HELP = "Seconds to wait for the next data event (keep-alives do not count)."
_DEADLINE_HELP = "Seconds one model call may take in all, retries included."


class _Settings(BaseModel):
    # A misspelt setting must fail loudly rather than be ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


class _RemoteSettings(_Settings):
    """Settings every SDK-backed provider shares."""

    @model_validator(mode="after")
    def _deadline_allows_one_wait(self) -> Self:
        check_limits(timeout=self.timeout, deadline=self.deadline)  # type: ignore[attr-defined]
        return self


class DemoSettings(_Settings):
    """The offline demo model."""

    delay: float = Field(0.02, ge=0, le=5, description="Seconds between streamed words.")
    reply_words: int = Field(
        0, ge=0, le=10_000, description="Pad plain replies to at least this many words."
    )
    first_token_delay: float = Field(
        0.0, ge=0, le=30, description="Seconds before the first word of every model call."
    )


class ScriptedSettings(_Settings):
    """Canned answers, one per model call (for tests and demonstrations)."""

    responses: list[str] = Field(
        min_length=1, description="The answers, in order; each is one model call."
    )
    delay: float = Field(0.0, ge=0, le=5, description="Seconds between streamed words.")
    repeat_last: bool = Field(False, description="Keep giving the last answer once all are used.")


class OpenAISettings(_RemoteSettings):
    """OpenAI or any server speaking its Chat Completions API (vLLM, llama.cpp, Ollama)."""

    base_url: HttpUrl | None = Field(
        None, description="Leave empty for OpenAI; e.g. http://localhost:11434/v1 for Ollama."
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        pattern=ENV_VAR_PATTERN,
        description="The environment variable holding the API key (never the key itself).",
    )
    timeout: float = Field(60.0, gt=0, le=3600, description=_TIMEOUT_HELP)
    deadline: float = Field(DEFAULT_DEADLINE, gt=0, le=86_400, description=_DEADLINE_HELP)
    max_retries: int = Field(2, ge=0, le=10)
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    extra_headers: dict[str, str] = Field(default_factory=dict)


class AnthropicSettings(_RemoteSettings):
    """Anthropic's Messages API."""

    base_url: HttpUrl | None = Field(None, description="Leave empty for api.anthropic.com.")
    api_key_env: str = Field(
        "ANTHROPIC_API_KEY",
        pattern=ENV_VAR_PATTERN,
        description="The environment variable holding the API key (never the key itself).",
    )
    timeout: float = Field(60.0, gt=0, le=3600, description=_TIMEOUT_HELP)
    deadline: float = Field(DEFAULT_DEADLINE, gt=0, le=86_400, description=_DEADLINE_HELP)
    max_retries: int = Field(2, ge=0, le=10)
    max_tokens: int = Field(4096, ge=1)
    temperature: float | None = Field(None, ge=0, le=1)


Factory = Callable[[str, Any], AgentModel]


@dataclass(slots=True, frozen=True)
class ProviderSpec:
    """One catalog entry."""

    key: str  # stored in AgentProfile.provider
    label: str  # shown in the admin
    settings_model: type[BaseModel]  # validates AgentProfile.provider_settings
    description: str
    factory: Factory  # (model name, validated settings) -> AgentModel


def _url(value: HttpUrl | None) -> str | None:
    return str(value) if value is not None else None


def _demo(model_name: str, settings: DemoSettings) -> AgentModel:
    from .demo import DemoModel

    return DemoModel(
        delay=settings.delay,
        reply_words=settings.reply_words,
        first_token_delay=settings.first_token_delay,
    )


def _scripted(model_name: str, settings: ScriptedSettings) -> AgentModel:
    from .scripted import ScriptedModel

    return ScriptedModel(
        list(settings.responses), delay=settings.delay, repeat_last=settings.repeat_last
    )


def _openai(model_name: str, settings: OpenAISettings) -> AgentModel:
    from .openai_chat import OpenAIChatModel

    return OpenAIChatModel(
        model_name,
        base_url=_url(settings.base_url),
        api_key_env=settings.api_key_env,
        timeout=settings.timeout,
        deadline=settings.deadline,
        max_retries=settings.max_retries,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        extra_headers=dict(settings.extra_headers),
    )


def _anthropic(model_name: str, settings: AnthropicSettings) -> AgentModel:
    from .anthropic_messages import AnthropicMessagesModel

    return AnthropicMessagesModel(
        model_name,
        base_url=_url(settings.base_url),
        api_key_env=settings.api_key_env,
        timeout=settings.timeout,
        deadline=settings.deadline,
        max_retries=settings.max_retries,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
    )


PROVIDERS: dict[str, ProviderSpec] = {
    spec.key: spec
    for spec in (
        ProviderSpec(
            "demo",
            "Demo (offline)",
            DemoSettings,
            "A deterministic offline model: echoes, arithmetic with the calculator, the clock.",
            _demo,
        ),
        ProviderSpec(
            "scripted",
            "Scripted",
            ScriptedSettings,
            "Answers with the configured texts in order; for tests and demonstrations.",
            _scripted,
        ),
        ProviderSpec(
            "openai",
            "OpenAI-compatible",
            OpenAISettings,
            "OpenAI's Chat Completions API, or vLLM, llama.cpp, Ollama at their /v1 URL.",
            _openai,
        ),
        ProviderSpec(
            "anthropic",
            "Anthropic",
            AnthropicSettings,
            "Anthropic's Messages API (Claude models).",
            _anthropic,
        ),
    )
}

# Providers that talk to a real model and so need to be told which one.
_NEEDS_MODEL_NAME = frozenset({"openai", "anthropic"})


def validate_settings(provider_key: str, settings: Mapping[str, Any] | None) -> BaseModel:
    """The provider's validated settings, or ValueError naming every bad field."""
    spec = get_provider(provider_key)
    try:
        return spec.settings_model.model_validate(dict(settings or {}))
    except pydantic.ValidationError as exc:
        raise ValueError(
            f"invalid settings for the {spec.label} provider: {describe_validation(exc)}"
        ) from None


def get_provider(provider_key: str) -> ProviderSpec:
    """The catalog entry for a key, or ValueError listing the known keys."""
    try:
        return PROVIDERS[provider_key]
    except (KeyError, TypeError):
        known = ", ".join(sorted(PROVIDERS))
        raise ValueError(
            f"unknown model provider {provider_key!r}; known providers: {known}"
        ) from None


def build_model(
    provider_key: str, model_name: str, settings: Mapping[str, Any] | None = None
) -> AgentModel:
    """Build the AgentModel a profile describes; ValueError explains what is wrong."""
    spec = get_provider(provider_key)
    if not isinstance(settings, Mapping) and settings is not None:
        raise ValueError(f"settings for the {spec.label} provider must be a JSON object")
    parsed = validate_settings(provider_key, settings)
    name = (model_name or "").strip()
    if provider_key in _NEEDS_MODEL_NAME and not name:
        raise ValueError(
            f"the {spec.label} provider needs a model name (the model to call, as the "
            "server names it)"
        )
    return spec.factory(name, parsed)
