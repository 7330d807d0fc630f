"""The tracer provider runs are traced with: trace ids that are request ids.

A run's ``invoke_agent`` span is a root span whose trace id is its request id (the UUID's
32 hex digits) whenever the tracer provider's id generator is ``RequestTraceIds``, as
``build_tracer_provider`` and ``configure_from_environment`` set it up: a run page can then
name its trace without storing it, and ``request_id_of_trace`` leads from a trace id a
backend shows back to the run. No Django here: ``manage.py agent`` traces alike.
"""

from __future__ import annotations

import random
import re
import threading
import uuid
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor


class RequestTraceIds(IdGenerator):
    """Random ids; with it, the span a run starts gets its request id as trace id.

    The choice is the extension's: it gives a run's invoke_agent span ``trace_id_of`` its
    request id when the tracer's id generator is one of these, and asks the generator
    otherwise. Every other span (and a request id that is no UUID) gets a random id.
    """

    def generate_span_id(self) -> int:
        return random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return random.getrandbits(128) or 1


def trace_id_of(request_id: str) -> int | None:
    """The trace id a request's spans carry: its UUID as a 128-bit number (None if no UUID)."""
    if not isinstance(request_id, str):
        return None
    # A length of 32 once the hyphens are gone is what uuid.UUID reads the same way (braces
    # or a URN prefix would leave fewer digits), at a tenth of its cost.
    digits = request_id.replace("-", "")
    try:
        value = int(digits, 16) if len(digits) == 32 else uuid.UUID(request_id).int
    except ValueError:
        return None
    return value or None


_HEX32 = re.compile(r"(?:0x)?([0-9a-f]{32})")
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def request_id_of_trace(text: str) -> str | None:
    """The request id a trace id names (32 hex digits, 0x-prefixed, or a W3C traceparent).

    The inverse of ``trace_id_of``: what a backend shows leads back to the run. None when
    ``text`` is no trace id.
    """
    text = text.strip().lower()
    match = _HEX32.fullmatch(text) or _TRACEPARENT.fullmatch(text)
    if match is None or not int(match.group(1), 16):
        return None
    return str(uuid.UUID(hex=match.group(1)))


def build_tracer_provider(*processors: SpanProcessor, resource: Any = None) -> TracerProvider:
    """A TracerProvider whose run traces carry their request ids, with these processors."""
    kwargs: dict[str, Any] = {"id_generator": RequestTraceIds()}
    if resource is not None:
        kwargs["resource"] = resource
    provider = TracerProvider(**kwargs)
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


_configure_lock = threading.Lock()


def configure_from_environment() -> trace.TracerProvider:
    """The process's tracer provider, set up once from the OTEL_* variables.

    An OTLP/HTTP exporter behind ``SpanBatches`` (a batch processor whose export thread wakes
    rarely; the OTEL_BSP_* variables tune it), the service named by OTEL_SERVICE_NAME; a
    provider somebody else installed already (for example ``opentelemetry-instrument``) is
    kept as it is.
    """
    with _configure_lock:
        current = trace.get_tracer_provider()
        if not isinstance(current, trace.ProxyTracerProvider):
            return current
        # Imported here: the exporter and its HTTP client load only when tracing is on.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource

        from .span_batches import SpanBatches

        provider = build_tracer_provider(
            SpanBatches(OTLPSpanExporter()), resource=Resource.create()
        )
        trace.set_tracer_provider(provider)
        return trace.get_tracer_provider()


__all__ = [
    "RequestTraceIds",
    "build_tracer_provider",
    "configure_from_environment",
    "request_id_of_trace",
    "trace_id_of",
]
