"""Which Agent a profile means: catalog, profile check, demo profile, agent cache."""

from .catalog import ExtensionSpec, ProfileConfigError, build_agent_for_profile

__all__ = ["ExtensionSpec", "ProfileConfigError", "build_agent_for_profile"]
