"""SpanBatches: every span queued reaches the exporter, in batches, and a full queue says so."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags

from agents.extensions.span_batches import SpanBatches


class Keeping(SpanExporter):
    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.threads: set[str] = set()
        self.shut = False
        self.exported = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.batches.append([span.name for span in spans])
        self.threads.add(threading.current_thread().name)
        self.exported.set()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.shut = True


def span(name: str, sampled: bool = True) -> ReadableSpan:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return ReadableSpan(name, SpanContext(1, len(name) + 1, False, flags))


def test_force_flush_exports_every_sampled_span_in_order_in_batches_of_the_batch_size() -> None:
    exporter = Keeping()
    processor = SpanBatches(exporter, max_export_batch_size=3, max_queue_size=100)
    for index in range(7):
        processor.on_end(span(f"s{index}"))
    processor.on_end(span("unsampled", sampled=False))
    assert processor.force_flush()
    assert exporter.batches == [["s0", "s1", "s2"], ["s3", "s4", "s5"], ["s6"]]
    processor.shutdown()
    assert exporter.shut
    assert exporter.batches[3:] == []  # nothing twice


def test_the_export_thread_exports_after_the_schedule_delay_without_a_flush() -> None:
    exporter = Keeping()
    processor = SpanBatches(exporter, schedule_delay_millis=50)
    processor.on_end(span("late"))
    assert exporter.exported.wait(5)
    assert exporter.batches == [["late"]]
    assert exporter.threads == {"ZettSpanBatches"}
    processor.shutdown()


def test_a_half_full_queue_wakes_the_export_thread_before_the_delay() -> None:
    exporter = Keeping()
    processor = SpanBatches(exporter, schedule_delay_millis=600_000, max_queue_size=8)
    for index in range(5):
        processor.on_end(span(f"s{index}"))
    assert exporter.exported.wait(5)
    processor.shutdown()
    assert sum(len(batch) for batch in exporter.batches) == 5


def test_a_full_queue_drops_counts_and_warns_and_shutdown_exports_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exporter = Keeping()
    processor = SpanBatches(exporter, schedule_delay_millis=600_000, max_queue_size=4)
    processor._wake_at = 10**9  # keep the thread asleep: the queue fills as under a busy loop  # noqa: SLF001
    for index in range(6):
        processor.on_end(span(f"s{index}"))
    assert processor.dropped == 2
    with caplog.at_level(logging.WARNING, logger="agents.extensions.span_batches"):
        processor.shutdown()
    assert exporter.batches == [["s0", "s1", "s2", "s3"]]
    assert "Dropped 2 spans" in caplog.text and "OTEL_BSP_MAX_QUEUE_SIZE=4" in caplog.text
    processor.on_end(span("after"))  # after shutdown: refused quietly
    assert not processor.force_flush()
    assert exporter.batches == [["s0", "s1", "s2", "s3"]]


def test_settings_come_from_the_standard_variables_and_bad_ones_are_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "soon")
    with caplog.at_level(logging.WARNING, logger="agents.extensions.span_batches"):
        processor = SpanBatches(Keeping())
    assert (processor.max_queue_size, processor.max_export_batch_size) == (64, 16)
    assert processor.schedule_delay == 5.0
    assert "OTEL_BSP_SCHEDULE_DELAY='soon'" in caplog.text
    processor.shutdown()
    with pytest.raises(ValueError, match="max_queue_size must be a positive integer"):
        SpanBatches(Keeping(), max_queue_size=0)
    with pytest.raises(ValueError, match="must not exceed max_queue_size"):
        SpanBatches(Keeping(), max_queue_size=4, max_export_batch_size=8)
