"""A local OTLP/HTTP trace receiver for benchmarks: accepts every export, counts it, keeps nothing.

The dashboard's exporter posts protobuf ``ExportTraceServiceRequest`` bodies to
``<endpoint>/v1/traces``; an empty 200 answer is a valid (empty) export response. Spans are
counted by decoding each body with the protobuf classes the exporter itself ships, so
"tracing on" is proved by what arrived, not assumed.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OtlpSink:
    """``with OtlpSink() as sink:`` then ``sink.endpoint``, ``sink.requests``, ``sink.spans``."""

    def __init__(self) -> None:
        self.requests = 0
        self.spans = 0
        self.bytes = 0
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 -- the http.server name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink._received(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """What OTEL_EXPORTER_OTLP_ENDPOINT should be (the exporter appends /v1/traces)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _received(self, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = sum(
            len(scope.spans)
            for resource in request.resource_spans
            for scope in resource.scope_spans
        )
        with self._lock:
            self.requests += 1
            self.bytes += len(body)
            self.spans += spans

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"requests": self.requests, "spans": self.spans, "bytes": self.bytes}

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
