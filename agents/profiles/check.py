"""The admin's "test this profile": one short prompt through the profile, nothing stored."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from ..runtime import AgentRunConfig
from .catalog import ProfileConfigError, build_agent_for_profile

PROFILE_TEST_PROMPT = "Reply with one short sentence to confirm you are working."
PROFILE_TEST_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class ProfileTestResult:
    ok: bool
    answer: str = ""
    error: str = ""
    seconds: float = 0.0


async def test_profile(
    profile: Any, rows: list[Any], *, timeout: float = PROFILE_TEST_TIMEOUT
) -> ProfileTestResult:
    """Run the test prompt with the profile's model and extensions (except the store).

    The caller loads ``rows`` (the profile's ExtensionSettings): this coroutine
    touches no database, so the async admin view awaits it holding no connection.
    """
    started = time.monotonic()
    try:
        agent = build_agent_for_profile(profile, rows, persist=False)
        answer = await asyncio.wait_for(
            agent.run(PROFILE_TEST_PROMPT, config=AgentRunConfig()), timeout
        )
    except ProfileConfigError as exc:
        return ProfileTestResult(False, error=f"cannot be built: {exc}")
    except TimeoutError:
        return ProfileTestResult(
            False,
            error=f"no answer within {timeout:g} s (does it wait for an operator, "
            "or is the model server slow?)",
            seconds=time.monotonic() - started,
        )
    except Exception as exc:  # the point is to show any failure to the admin
        return ProfileTestResult(False, error=f"failed: {exc}", seconds=time.monotonic() - started)
    return ProfileTestResult(True, answer=answer.content, seconds=time.monotonic() - started)
