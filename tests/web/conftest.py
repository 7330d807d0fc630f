"""Fixtures for the run-hosting tests: a RunManager per test, profiles, sessions, listeners."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

# A safety net only: every wait below is for a frame that a correct host sends promptly.
FRAME_TIMEOUT = 10.0


class Listener:
    """One channel-layer channel in a group; collects the frames it receives, in order."""

    def __init__(self, layer: Any, channel: str) -> None:
        self.layer = layer
        self.channel = channel
        self.frames: list[dict[str, Any]] = []

    async def next(self, timeout: float = FRAME_TIMEOUT) -> dict[str, Any]:
        frame = await asyncio.wait_for(self.layer.receive(self.channel), timeout)
        self.frames.append(frame)
        return frame

    async def until(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = FRAME_TIMEOUT
    ) -> dict[str, Any]:
        """Receive frames until one matches; returns it (every frame is kept in .frames)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                types = [frame.get("type") for frame in self.frames]
                raise TimeoutError(f"no matching frame within {timeout} s; got {types}")
            frame = await self.next(remaining)
            if predicate(frame):
                return frame

    async def until_type(self, kind: str, timeout: float = FRAME_TIMEOUT) -> dict[str, Any]:
        return await self.until(lambda frame: frame.get("type") == kind, timeout)

    async def finished(self, request_id: str | None = None) -> dict[str, Any]:
        """The run.finished frame (of request_id when given)."""
        return await self.until(
            lambda frame: (
                frame.get("type") == "run.finished"
                and (request_id is None or frame.get("request_id") == request_id)
            )
        )

    def of(self, request_id: str) -> list[dict[str, Any]]:
        return [frame for frame in self.frames if frame.get("request_id") == request_id]


@pytest.fixture
async def manager(channel_layer: Any) -> AsyncIterator[Any]:
    """This event loop's RunManager, closed (its runs cancelled and awaited) after the test."""
    from agents.hosting import get_run_manager

    run_manager = get_run_manager()
    yield run_manager
    await run_manager.close()


@pytest.fixture
def listen(channel_layer: Any) -> Callable[[str], Awaitable[Listener]]:
    """listen(group) -> a Listener whose channel has joined that group."""

    async def join(group: str) -> Listener:
        channel = await channel_layer.new_channel("test-listener.")
        await channel_layer.group_add(group, channel)
        return Listener(channel_layer, channel)

    return join


@pytest.fixture
def listen_session(
    listen: Callable[[str], Awaitable[Listener]],
) -> Callable[[str], Awaitable[Listener]]:
    """listen_session(session_id) -> a Listener on that session's group."""
    from agents.hosting import session_group

    async def join(session_id: str) -> Listener:
        return await listen(session_group(session_id))

    return join


async def create_profile(
    *,
    provider: str = "demo",
    provider_settings: dict[str, Any] | None = None,
    extensions: tuple[tuple[str, dict[str, Any]], ...] = (),
    double_texting: str = "steer",
    slug: str | None = None,
    system_prompt: str = "You are a helpful assistant.",
) -> Any:
    """An AgentProfile with ExtensionSetting rows (key, settings) in the given order."""
    from agents.models import AgentProfile, ExtensionSetting

    count = await AgentProfile.objects.acount()
    slug = slug or f"profile-{count + 1}"
    profile = await AgentProfile.objects.acreate(
        name=slug.replace("-", " ").title(),
        slug=slug,
        provider=provider,
        model_name=provider,
        provider_settings=provider_settings if provider_settings is not None else {"delay": 0},
        system_prompt=system_prompt,
        double_texting=double_texting,
    )
    for position, (key, settings) in enumerate(extensions):
        await ExtensionSetting.objects.acreate(
            profile=profile, key=key, settings=settings, position=position
        )
    return profile


async def create_session(owner: Any, profile: Any, title: str = "") -> Any:
    from agents.models import ChatSession

    return await ChatSession.objects.acreate(owner=owner, profile=profile, title=title)


@pytest.fixture
def make_profile() -> Callable[..., Awaitable[Any]]:
    """await make_profile(provider=..., provider_settings=..., extensions=..., ...)."""
    return create_profile


@pytest.fixture
def make_session() -> Callable[..., Awaitable[Any]]:
    """await make_session(owner, profile) -> a ChatSession."""
    return create_session
