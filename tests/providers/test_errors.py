"""ProviderError is the runtime's expected model failure, so a host needs no adapter import."""

from __future__ import annotations

import pickle

import pytest

from agents.providers.errors import ProviderError
from agents.runtime import ModelCallError


def test_a_provider_error_is_caught_as_the_runtimes_model_call_error() -> None:
    with pytest.raises(ModelCallError) as caught:
        raise ProviderError("OpenAI rejected the API key.", provider="openai", kind="auth")

    assert str(caught.value) == "OpenAI rejected the API key."
    assert not isinstance(caught.value, RuntimeError)  # not a contract break


def test_a_provider_error_keeps_its_details_across_processes() -> None:
    error = ProviderError("Slow down.", provider="anthropic", kind="rate_limited", status=429)

    copy = pickle.loads(pickle.dumps(error))

    assert isinstance(copy, ModelCallError)
    assert (copy.kind, copy.provider, copy.status, copy.retryable, str(copy)) == (
        "rate_limited",
        "anthropic",
        429,
        True,
        "Slow down.",
    )
