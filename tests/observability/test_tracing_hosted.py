"""Tracing in the site: every profile's runs traced when OTLP is configured, the trace id shown."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import AsyncClient, override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents.extensions.tracing import TracingExtension, build_tracer_provider
from agents.models import ExtensionSetting
from agents.profiles.catalog import ExtensionRow, build_extensions

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_TOOLS = ("demo_tools", {"tools": ["calculator"]})


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """The process's tracer provider, as OTEL_* configuration would install it, in memory."""
    memory = InMemorySpanExporter()
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("another tracer provider is installed in this process")
    trace.set_tracer_provider(build_tracer_provider(SimpleSpanProcessor(memory)))
    return memory


def test_tracing_is_added_to_every_profile_only_when_configured(
    exporter: InMemorySpanExporter,
) -> None:
    rows = [ExtensionRow("demo_tools")]
    with override_settings(ZETT_TRACING=False):
        assert not any(isinstance(e, TracingExtension) for e in build_extensions(rows))
    with override_settings(ZETT_TRACING=True, ZETT_TRACE_CONTENT=True):
        (tracing,) = [e for e in build_extensions(rows) if isinstance(e, TracingExtension)]
        assert tracing.settings.capture_content is True
        # A disabled row turns it off for one profile.
        off = [*rows, ExtensionRow("tracing", enabled=False)]
        assert not any(isinstance(e, TracingExtension) for e in build_extensions(off))


async def test_a_hosted_run_is_traced_under_its_profile_and_its_page_names_the_trace(
    exporter: InMemorySpanExporter,
    manager: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
) -> None:
    exporter.clear()
    with override_settings(ZETT_TRACING=True):
        profile = await make_profile(extensions=(DEMO_TOOLS,), slug="calc")
        session = await make_session(user, profile)
        listener = await listen_session(session.id)
        reply = await manager.submit_message(session.id, user, "What is 6 * 7?")
        assert (await listener.finished(reply.request_id))["run"]["status"] == "completed"
        await manager.wait_idle()

    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"invoke_agent Calc", "chat demo", "execute_tool calculator"}
    root = spans["invoke_agent Calc"]
    trace_id = uuid.UUID(reply.request_id).int
    assert root.context.trace_id == trace_id
    assert root.attributes is not None
    assert root.attributes["gen_ai.conversation.id"] == session.id
    assert root.attributes["zett.request_id"] == reply.request_id
    assert root.attributes["user.id"] == user.get_username()
    assert root.attributes["gen_ai.provider.name"] == "demo"
    assert spans["execute_tool calculator"].parent.span_id == root.context.span_id  # type: ignore[union-attr]

    client = AsyncClient()
    await client.aforce_login(user)
    page = await client.get(f"/runs/{reply.request_id}/")
    assert page.status_code == 200
    assert f'data-testid="trace-id">{trace_id:032x}</code>' in page.content.decode()


async def test_without_otlp_configuration_a_profile_runs_untraced(
    exporter: InMemorySpanExporter,
    manager: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
) -> None:
    exporter.clear()
    with override_settings(ZETT_TRACING=False):
        profile = await make_profile(slug="plain")
        assert not await ExtensionSetting.objects.filter(profile=profile).aexists()
        session = await make_session(user, profile)
        listener = await listen_session(session.id)
        reply = await manager.submit_message(session.id, user, "Hello")
        assert (await listener.finished(reply.request_id))["run"]["status"] == "completed"

    assert exporter.get_finished_spans() == ()
