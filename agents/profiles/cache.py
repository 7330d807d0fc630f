"""AgentCache: one Agent per profile, rebuilt when the profile or its extensions change.

An Agent is built once per profile and shared by the profile's runs (its extensions key
their state by session). The fingerprint covers every field that shapes the Agent, so an
admin's edit reaches the next run without a restart.
"""

from __future__ import annotations

from typing import Any

from ..runtime import Agent
from .catalog import build_agent_for_profile


def fingerprint(profile: Any, rows: Any) -> str:
    return repr(
        (
            profile.updated_at,
            profile.provider,
            profile.model_name,
            profile.provider_settings,
            profile.system_prompt,
            profile.max_iterations,
            rows,
        )
    )


class AgentCache:
    def __init__(self) -> None:
        self._agents: dict[int, tuple[str, Agent]] = {}

    def agent_for(self, profile: Any, rows: Any) -> Agent:
        """The profile's Agent (ProfileConfigError when the profile cannot be built)."""
        key = fingerprint(profile, rows)
        cached = self._agents.get(profile.pk)
        if cached is not None and cached[0] == key:
            return cached[1]
        agent = build_agent_for_profile(profile, rows)
        self._agents[profile.pk] = (key, agent)
        return agent
