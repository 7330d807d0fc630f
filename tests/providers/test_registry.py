"""The provider catalog: settings validation, clear errors, the models it builds."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from agents.providers.anthropic_messages import AnthropicMessagesModel
from agents.providers.demo import DemoModel
from agents.providers.errors import ProviderError
from agents.providers.openai_chat import OpenAIChatModel
from agents.providers.registry import (
    PROVIDERS,
    AnthropicSettings,
    DemoSettings,
    OpenAISettings,
    ScriptedSettings,
    build_model,
)
from agents.providers.scripted import ScriptedModel
from agents.runtime import ModelRequest, UserMessage

from .streams import collect, completed


def test_catalog_lists_the_four_providers_with_their_settings_models() -> None:
    assert list(PROVIDERS) == ["demo", "scripted", "openai", "anthropic"]
    assert {key: spec.settings_model for key, spec in PROVIDERS.items()} == {
        "demo": DemoSettings,
        "scripted": ScriptedSettings,
        "openai": OpenAISettings,
        "anthropic": AnthropicSettings,
    }
    for key, spec in PROVIDERS.items():
        assert spec.key == key
        assert spec.label and spec.description


def test_demo_model_gets_its_delay() -> None:
    model = build_model("demo", "", {"delay": 0.5})

    assert isinstance(model, DemoModel)
    assert model.delay == 0.5


async def test_scripted_model_answers_with_the_configured_responses() -> None:
    model = build_model("scripted", "", {"responses": ["first", "second"]})
    request = ModelRequest(messages=(UserMessage("hi"),))

    assert isinstance(model, ScriptedModel)
    answers = [completed(await collect(model, request)).message.content for _ in range(2)]
    assert answers == ["first", "second"]


def test_openai_settings_reach_the_model() -> None:
    model = build_model(
        "openai",
        "llama3.1",
        {
            "base_url": "http://localhost:11434/v1",
            "api_key_env": "OLLAMA_KEY",
            "timeout": 5,
            "max_retries": 0,
            "temperature": 0.1,
            "max_tokens": 256,
        },
    )

    assert isinstance(model, OpenAIChatModel)
    assert (model.model, model.base_url, model.api_key_env) == (
        "llama3.1",
        "http://localhost:11434/v1",
        "OLLAMA_KEY",
    )
    assert (model.timeout, model.max_retries, model.temperature, model.max_tokens) == (
        5,
        0,
        0.1,
        256,
    )


def test_anthropic_defaults_apply_when_settings_are_empty() -> None:
    model = build_model("anthropic", "claude-sonnet-4-5", {})

    assert isinstance(model, AnthropicMessagesModel)
    assert (model.base_url, model.api_key_env, model.max_tokens) == (
        None,
        "ANTHROPIC_API_KEY",
        4096,
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_every_remote_model_call_has_a_ten_minute_deadline_by_default(provider: str) -> None:
    model = build_model(provider, "some-model", {})

    assert (model.timeout, model.deadline) == (60, 600)  # type: ignore[attr-defined]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_deadline_setting_reaches_the_model(provider: str) -> None:
    model = build_model(provider, "some-model", {"timeout": 4, "deadline": 90})

    assert (model.timeout, model.deadline) == (4, 90)  # type: ignore[attr-defined]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_deadline_shorter_than_the_timeout_is_rejected(provider: str) -> None:
    with pytest.raises(
        ValueError, match=r"deadline \(30 s\) must be at least the timeout \(60 s\)"
    ):
        build_model(provider, "some-model", {"deadline": 30})


@pytest.mark.parametrize("deadline", [0, -1, 86_401])
def test_the_deadline_is_bounded(deadline: float) -> None:
    with pytest.raises(ValueError, match="deadline: Input should be"):
        build_model("openai", "some-model", {"deadline": deadline})


def test_unknown_provider_is_a_value_error_listing_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown model provider 'gemini'") as caught:
        build_model("gemini", "x", {})

    assert "anthropic, demo, openai, scripted" in str(caught.value)


def test_invalid_settings_are_flattened_to_field_messages() -> None:
    with pytest.raises(ValueError) as caught:
        build_model("openai", "gpt-4o-mini", {"timeout": 0, "base_url": "not a url"})

    message = str(caught.value)
    assert message.startswith("invalid settings for the OpenAI-compatible provider: ")
    assert "timeout: Input should be greater than 0" in message
    assert "base_url: " in message


def test_a_misspelt_setting_is_rejected_rather_than_ignored() -> None:
    with pytest.raises(ValueError, match="max_retry: Extra inputs are not permitted"):
        build_model("openai", "gpt-4o-mini", {"max_retry": 3})


@pytest.mark.parametrize("name", ["sk-live-1234", "MY KEY", "1ABC", ""])
def test_api_key_env_must_look_like_a_variable_name(name: str) -> None:
    with pytest.raises(ValueError, match="api_key_env: String should match pattern"):
        build_model("anthropic", "claude-sonnet-4-5", {"api_key_env": name})


def test_demo_delay_is_bounded() -> None:
    with pytest.raises(ValueError, match="delay: Input should be less than or equal to 5"):
        build_model("demo", "", {"delay": 6})


def test_scripted_needs_at_least_one_response() -> None:
    with pytest.raises(ValueError, match="responses: "):
        build_model("scripted", "", {"responses": []})


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_real_providers_need_a_model_name(provider: str) -> None:
    with pytest.raises(ValueError, match="needs a model name"):
        build_model(provider, "  ", {})


def test_settings_must_be_an_object() -> None:
    with pytest.raises(ValueError, match="must be a JSON object"):
        build_model("demo", "", ["delay", 1])  # type: ignore[arg-type]


def test_importing_the_catalog_imports_no_provider_sdk() -> None:
    probe = (
        "import sys, agents.providers.registry; "
        "print(sorted(m for m in ('openai', 'anthropic', 'django') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )

    assert result.stdout.strip() == "[]"


def test_provider_error_survives_pickling_with_its_attributes() -> None:
    # Errors cross process boundaries (run workers), so they must pickle intact.
    error = ProviderError(
        "Anthropic is overloaded.", provider="anthropic", kind="server", status=529
    )

    copy = pickle.loads(pickle.dumps(error))

    assert (str(copy), copy.provider, copy.kind, copy.status, copy.retryable) == (
        "Anthropic is overloaded.",
        "anthropic",
        "server",
        529,
        True,
    )


def test_provider_error_rejects_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown ProviderError kind"):
        ProviderError("x", provider="openai", kind="weird")


def test_demo_model_gets_its_first_token_delay() -> None:
    model = build_model("demo", "", {"first_token_delay": 1.5})

    assert isinstance(model, DemoModel)
    assert model.first_token_delay == 1.5
    with pytest.raises(ValueError, match="first_token_delay: Input should be less than or equal"):
        build_model("demo", "", {"first_token_delay": 31})
