"""ProviderError: what a model adapter raises when the provider cannot answer, worded for people.

Adapters translate their SDK's exceptions into one ``ProviderError`` whose ``kind`` says what
went wrong in provider-neutral terms and whose message says what to check. Messages never
contain the API key: they name the environment variable it comes from instead.
"""

from __future__ import annotations

from ..runtime.errors import ModelCallError

KINDS = frozenset(
    {
        "auth",  # the key is missing, wrong or lacks permission
        "not_found",  # unknown model or wrong base URL
        "rate_limited",  # 429, still refused after the SDK's retries
        "timeout",  # no answer (or no next chunk) within the timeout
        "connection",  # could not reach the server at all
        "stream_dropped",  # the answer started streaming and then broke off
        "bad_request",  # the server rejected the request itself (context too long, bad schema)
        "server",  # 5xx, overloaded, or an error reported inside the stream
        "config",  # our own settings are unusable (no key for a hosted provider, ...)
    }
)

# Whether trying the same request again later can succeed.
_RETRYABLE_KINDS = frozenset({"rate_limited", "timeout", "connection", "stream_dropped", "server"})

_DETAIL_LIMIT = 300


class ProviderError(ModelCallError):
    """A model provider failed; ``str(error)`` is a message a person can act on."""

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        kind: str,
        status: int | None = None,
        retryable: bool | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown ProviderError kind {kind!r}")
        super().__init__(message)
        self.message = message
        self.provider = provider  # the registry key: "openai", "anthropic"
        self.kind = kind
        self.status = status  # the HTTP status behind the error, if there was one
        self.retryable = kind in _RETRYABLE_KINDS if retryable is None else retryable

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only attributes would be lost by Exception's default pickling.
        return (_rebuild, (self.message, self.provider, self.kind, self.status, self.retryable))

    def __repr__(self) -> str:
        return (
            f"ProviderError(kind={self.kind!r}, provider={self.provider!r}, "
            f"status={self.status!r}, message={self.message!r})"
        )


def _rebuild(
    message: str, provider: str, kind: str, status: int | None, retryable: bool
) -> ProviderError:
    return ProviderError(message, provider=provider, kind=kind, status=status, retryable=retryable)


def scrub(text: str, secret: str | None) -> str:
    """Shorten a server-supplied detail and remove the key from it, should a server echo it."""
    text = " ".join(str(text).split())
    if secret and len(secret) >= 4:
        text = text.replace(secret, "***")
    if len(text) > _DETAIL_LIMIT:
        text = text[:_DETAIL_LIMIT] + "…"
    return text


def _retries(count: int) -> str:
    return "1 retry" if count == 1 else f"{count} retries"


def status_error(
    *,
    provider: str,
    where: str,
    status: int,
    detail: str,
    model: str,
    api_key_env: str,
    max_retries: int,
    kind: str | None = None,
) -> ProviderError:
    """The ProviderError for an HTTP error status (or an in-stream error of that kind).

    ``where`` names the server, e.g. "OpenAI-compatible provider at http://host/v1";
    ``detail`` is the server's own explanation, already scrubbed.
    """
    said = f" The server said: {detail}" if detail else ""
    if kind is None:
        if status in (401, 403):
            kind = "auth"
        elif status == 404:
            kind = "not_found"
        elif status == 429:
            kind = "rate_limited"
        elif status == 408:
            kind = "timeout"
        elif status >= 500:
            kind = "server"
        else:
            kind = "bad_request"
    code = f" ({status})" if status else ""
    if kind == "auth":
        if status == 403:
            text = (
                f"{where} refused access with this API key{code}. Check that the key in the "
                f"environment variable {api_key_env} may use the model '{model}'."
            )
        else:
            # The server's text is left out on purpose: some servers quote part of the key.
            text = (
                f"{where} rejected the API key{code}. Check the environment variable {api_key_env}."
            )
    elif kind == "not_found":
        text = (
            f"{where} does not know the model '{model}'{code}. Check the model name and the "
            f"base URL (OpenAI-compatible servers usually serve under /v1).{said}"
        )
    elif kind == "rate_limited":
        text = (
            f"{where} is rate limiting requests{code} and still refused after "
            f"{_retries(max_retries)}. Wait a moment and try again, or lower the request "
            f"rate.{said}"
        )
    elif kind == "timeout":
        text = f"{where} gave up waiting for the request{code}. Try again.{said}"
    elif kind == "server":
        text = (
            f"{where} had an internal problem{code} and still failed after "
            f"{_retries(max_retries)}. Try again later.{said}"
        )
    else:
        text = f"{where} rejected the request for model '{model}'{code}.{said}"
    return ProviderError(text, provider=provider, kind=kind, status=status or None)


def timeout_error(
    *, provider: str, where: str, timeout: float, max_retries: int, streaming: bool
) -> ProviderError:
    """The ProviderError for a request (or a stream) that went silent for ``timeout`` seconds."""
    if streaming:
        text = (
            f"{where} stopped sending the answer: no data for {timeout:g} s (keep-alive "
            "messages do not count). Raise the timeout setting if the model is slow, or try "
            "again."
        )
    else:
        text = (
            f"{where} did not answer within {timeout:g} s (after {_retries(max_retries)}). "
            "Raise the timeout setting if the model is slow, or check the server."
        )
    return ProviderError(text, provider=provider, kind="timeout")


def connection_error(
    *, provider: str, where: str, cause: BaseException | None, streaming: bool
) -> ProviderError:
    """The ProviderError for a server that cannot be reached, or that broke off an answer."""
    reason = _cause_text(cause)
    if streaming:
        return ProviderError(
            f"The connection to {where} dropped in the middle of the answer{reason}. Try again.",
            provider=provider,
            kind="stream_dropped",
        )
    return ProviderError(
        f"Could not connect to {where}{reason}. Check that the server is running and that the "
        "base URL is right.",
        provider=provider,
        kind="connection",
    )


def incomplete_stream_error(*, provider: str, where: str) -> ProviderError:
    """The ProviderError for a stream that ended cleanly but without its final event."""
    return ProviderError(
        f"{where} ended the answer before it was complete (the stream stopped without a "
        "finish marker). Try again.",
        provider=provider,
        kind="stream_dropped",
    )


def _cause_text(cause: BaseException | None) -> str:
    # The SDKs wrap the transport error; its own text ("Connection refused") is what helps.
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        inner = cause.__cause__ or cause.__context__
        if inner is None:
            break
        cause = inner
    text = " ".join(str(cause).split()) if cause is not None else ""
    if not text or text in ("Connection error.",):
        return ""
    return f" ({text[:_DETAIL_LIMIT]})"
