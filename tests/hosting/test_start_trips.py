"""A run's start: how many hops to the one ORM thread lie between a chat message and the model.

Every sync ORM call of the process runs on one thread (``database_sync_to_async``, the async
ORM and our ``db_hop`` functions all enter it through asgiref's ``SyncToAsync.__call__`` with
``thread_sensitive=True``). Each hop waits behind every other run's writes, so the path to the
first token takes as few as can be: one transaction that creates the run and reads what the
run needs (session, extensions, prices, history), then the model start's checkpoint.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from asgiref.sync import SyncToAsync

from agents.providers.demo import DemoModel

pytestmark = pytest.mark.django_db(transaction=True)

#: ORM-thread hops from a chat message to the model's first call (was 5 before issue 12): the
#: start (run, input message, and what the run needs) and the model start's checkpoint.
START_TRIPS = 2


class TripCounter:
    """The names of the functions sent to the ORM thread, in order; a snapshot at the model."""

    def __init__(self) -> None:
        self.trips: list[str] = []
        self.at_model: list[str] | None = None


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> TripCounter:
    counter = TripCounter()
    enter = SyncToAsync.__call__

    @functools.wraps(enter)
    async def counting(self: SyncToAsync, *args: Any, **kwargs: Any) -> Any:
        if self._thread_sensitive:
            name = getattr(self.func, "__qualname__", type(self.func).__name__)
            counter.trips.append(name)
        return await enter(self, *args, **kwargs)

    stream = DemoModel.stream

    @functools.wraps(stream)
    def first_call(self: DemoModel, request: Any) -> Any:
        if counter.at_model is None:
            counter.at_model = list(counter.trips)
        return stream(self, request)

    monkeypatch.setattr(SyncToAsync, "__call__", counting)
    monkeypatch.setattr(DemoModel, "stream", first_call)
    return counter


_DEMO_EXTENSIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("session_store", {}),
    ("demo_tools", {"tools": ["calculator", "clock"]}),
    ("ask_user", {}),
    ("steering", {}),
)


async def _first_run(manager: Any, user: Any, session: Any, listen_session: Any) -> str:
    listener = await listen_session(session.id)
    reply = await manager.submit_message(session.id, user, "Hello there, how are you?")
    assert reply.accepted, reply.reason
    await listener.finished(reply.request_id)
    return reply.request_id


async def test_a_run_start_is_two_trips_to_the_orm_thread(
    manager: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
    trips: TripCounter,
) -> None:
    profile = await make_profile(extensions=_DEMO_EXTENSIONS)
    session = await make_session(user, profile)
    await manager.start()  # the process-wide loops start once, not per run
    trips.trips.clear()

    await _first_run(manager, user, session, listen_session)

    assert trips.at_model is not None, "the model was never called"
    assert len(trips.at_model) == START_TRIPS, trips.at_model


async def test_a_follow_up_run_with_history_takes_as_many_trips(
    manager: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
    trips: TripCounter,
) -> None:
    profile = await make_profile(extensions=_DEMO_EXTENSIONS)
    session = await make_session(user, profile)
    await manager.start()
    await _first_run(manager, user, session, listen_session)
    trips.trips.clear()
    trips.at_model = None

    await _first_run(manager, user, session, listen_session)

    assert trips.at_model is not None
    assert len(trips.at_model) == START_TRIPS, trips.at_model
