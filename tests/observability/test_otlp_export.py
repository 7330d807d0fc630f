"""OTLP/HTTP export: a process set up by OTEL_* variables sends its run's spans to a receiver."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ROOT = Path(__file__).resolve().parents[2]
REQUEST_ID = str(uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF))

# A run outside the site, as `manage.py agent` or a script would make one: no Django.
SCRIPT = textwrap.dedent(
    f"""
    import asyncio
    from agents.extensions.tracing import TracingExtension, configure_from_environment
    from agents.providers.scripted import ScriptedModel
    from agents.runtime import Agent, AgentRunConfig

    provider = configure_from_environment()
    tracing = TracingExtension(tracer_provider=provider, agent_name="Cli", provider="scripted")
    agent = Agent(ScriptedModel(["Hello back"]), extensions=[tracing])
    config = AgentRunConfig(session_id="s-otlp", request_id={REQUEST_ID!r})
    asyncio.run(agent.run("Hello", config=config))
    provider.shutdown()  # flushes the batch: the export is answered before we exit
    """
)


class _Receiver(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 -- the http.server hook's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], body))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    _Receiver.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Receiver.received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_spans_of_a_run_reach_an_otlp_http_receiver_named_by_the_standard_variables(
    receiver: tuple[str, list[tuple[str, str, bytes]]],
) -> None:
    endpoint, received = receiver
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OTEL_") and key != "DJANGO_SETTINGS_MODULE"
    }
    env.update(
        PYTHONPATH=str(ROOT),
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_SERVICE_NAME="zett-otlp-test",
    )
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr

    assert [(path, kind) for path, kind, _ in received] == [
        ("/v1/traces", "application/x-protobuf")
    ]
    export = ExportTraceServiceRequest.FromString(received[0][2])
    (resource_spans,) = export.resource_spans
    resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert resource["service.name"] == "zett-otlp-test"
    spans = {span.name: span for scope in resource_spans.scope_spans for span in scope.spans}
    assert set(spans) == {"invoke_agent Cli", "chat scripted"}
    root, chat = spans["invoke_agent Cli"], spans["chat scripted"]
    assert root.trace_id == uuid.UUID(REQUEST_ID).bytes and root.parent_span_id == b""
    assert chat.trace_id == root.trace_id and chat.parent_span_id == root.span_id
    attributes = {a.key: a.value for a in root.attributes}
    assert attributes["gen_ai.conversation.id"].string_value == "s-otlp"
    assert attributes["zett.run.status"].string_value == "completed"
