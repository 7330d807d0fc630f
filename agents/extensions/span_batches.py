"""SpanBatches: a span processor that hands ended spans to an exporter in batches, rarely.

The SDK's ``BatchSpanProcessor`` wakes its export thread whenever 512 spans are queued. Under
a busy event loop every such wake costs more than the export: the woken thread waits for the
interpreter lock, and each time the loop releases it (once per loop iteration) the waiting
thread is signalled and loses again, for up to the 5 ms switch interval; at W1's ~11,000
spans a second that is ~20 wakes a second and took some 8% of its throughput. This
processor's thread wakes every ``OTEL_BSP_SCHEDULE_DELAY`` milliseconds, or early once the
queue is half full, and then exports everything queued, in requests of at most
``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` spans. Ending a span appends it to a deque: no lock, no
system call. The span that wakes the thread early also lets go of the interpreter lock for
half a millisecond (``HANDOFF_SECONDS``, once per half a queue of spans), so the woken thread
takes it at once instead of contending for it with a loop that never idles: on W1 that wait
cost ~1.5% of throughput and the context switches the woken thread makes.

It reads the SDK's OTEL_BSP_* variables; its queue is larger by default (16384 spans, not 2048)
since it is emptied less often. A full queue drops the spans that do not fit, counts them
(``dropped``) and says so in a warning at the next export. ``force_flush`` exports on the
calling thread; ``shutdown`` exports what is left and shuts the exporter down.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span
    from opentelemetry.sdk.trace.export import SpanExporter

_log = logging.getLogger(__name__)

SCHEDULE_DELAY = "OTEL_BSP_SCHEDULE_DELAY"
MAX_QUEUE_SIZE = "OTEL_BSP_MAX_QUEUE_SIZE"
MAX_EXPORT_BATCH_SIZE = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
DEFAULT_SCHEDULE_DELAY_MILLIS = 5000
DEFAULT_MAX_QUEUE_SIZE = 16384
DEFAULT_MAX_EXPORT_BATCH_SIZE = 512
#: How long the span that wakes the export thread early sleeps, leaving it the interpreter lock.
HANDOFF_SECONDS = 0.0005


def _setting(value: int | None, variable: str, default: int) -> int:
    """An argument, else the variable, else the default; a bad variable is warned about."""
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(
                f"{variable.removeprefix('OTEL_BSP_').lower()} must be a positive "
                f"integer, not {value!r}"
            )
        return value
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number <= 0:
        _log.warning("%s=%r is no positive integer: using %d", variable, text, default)
        return default
    return number


class SpanBatches(SpanProcessor):
    """Exports ended, sampled spans in batches from a thread that wakes rarely."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        schedule_delay_millis: int | None = None,
        max_queue_size: int | None = None,
        max_export_batch_size: int | None = None,
    ) -> None:
        self.exporter = exporter
        self.schedule_delay = (
            _setting(schedule_delay_millis, SCHEDULE_DELAY, DEFAULT_SCHEDULE_DELAY_MILLIS) / 1000
        )
        self.max_queue_size = _setting(max_queue_size, MAX_QUEUE_SIZE, DEFAULT_MAX_QUEUE_SIZE)
        batch = _setting(
            max_export_batch_size, MAX_EXPORT_BATCH_SIZE, DEFAULT_MAX_EXPORT_BATCH_SIZE
        )
        if batch > self.max_queue_size:
            if max_export_batch_size is not None and max_queue_size is not None:
                raise ValueError(
                    f"max_export_batch_size ({batch}) must not exceed max_queue_size "
                    f"({self.max_queue_size})"
                )
            batch = self.max_queue_size
        self.max_export_batch_size = batch
        self.dropped = 0  # spans a full queue refused, since the start
        self._unreported = 0  # of those, the ones no warning has named yet
        self._wake_at = max(1, self.max_queue_size // 2)
        self._closed = False
        self._start()
        if hasattr(os, "register_at_fork"):
            restart = weakref.WeakMethod(self._start)

            def after_in_child() -> None:
                method = restart()
                if method is not None:
                    method()

            os.register_at_fork(after_in_child=after_in_child)

    def _start(self) -> None:
        """A new queue and export thread (at construction, and in a forked child)."""
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._waking = False  # the thread has been woken early and not yet emptied the queue
        self._wake = threading.Event()
        self._export_lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, name="ZettSpanBatches", daemon=True)
        self._thread.start()

    # -- the span processor's interface -----------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._closed or not span.context.trace_flags.sampled:
            return
        queue = self._queue
        size = len(queue)
        if size >= self.max_queue_size:
            self.dropped += 1
            self._unreported += 1
            return
        queue.append(span)
        if size >= self._wake_at and not self._waking:
            self._waking = True
            self._wake.set()
            time.sleep(HANDOFF_SECONDS)  # the lock to the woken thread, now (module docstring)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export every span queued now, on this thread; False if the time ran out first."""
        if self._closed:
            return False
        return self._export(time.monotonic() + timeout_millis / 1000)

    def shutdown(self) -> None:
        """Export what is queued, stop the thread and shut the exporter down."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._thread.join()
        self.exporter.shutdown()

    # -- the export thread ------------------------------------------------------------

    def _work(self) -> None:
        while not self._closed:
            self._wake.wait(self.schedule_delay)
            self._wake.clear()
            self._export(None)
            self._waking = False
        self._export(None)

    def _export(self, deadline: float | None) -> bool:
        """Export the spans queued when called, in batches; False past the deadline."""
        with self._export_lock:
            queue, batch_size = self._queue, self.max_export_batch_size
            left = len(queue)  # what came later waits for the next export
            token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
            try:
                while left:
                    if deadline is not None and time.monotonic() > deadline:
                        return False
                    count = min(left, batch_size)
                    batch = [queue.popleft() for _ in range(count)]
                    left -= count
                    try:
                        self.exporter.export(batch)
                    except Exception:
                        _log.exception("Exporting %d spans failed", count)
            finally:
                detach(token)
                self._report_drops()
        return True

    def _report_drops(self) -> None:
        dropped, self._unreported = self._unreported, 0
        if dropped:
            _log.warning(
                "Dropped %d spans: the span queue (%s=%d) was full; raise it for this rate",
                dropped,
                MAX_QUEUE_SIZE,
                self.max_queue_size,
            )


__all__ = ["SpanBatches"]
