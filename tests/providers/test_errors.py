"""ProviderError is the runtime's expected model failure, so a host needs no adapter import."""

from __future__ import annotations

import pytest

from agents.providers.errors import ProviderError
from agents.runtime import ModelCallError


def test_a_provider_error_is_caught_as_the_runtimes_model_call_error() -> None:
    with pytest.raises(ModelCallError) as caught:
        raise ProviderError("OpenAI rejected the API key.", provider="openai", kind="auth")

    assert str(caught.value) == "OpenAI rejected the API key."
    assert not isinstance(caught.value, RuntimeError)  # not a contract break
