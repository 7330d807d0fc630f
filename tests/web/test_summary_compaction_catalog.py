"""The summary_compaction catalog entry: validated settings, optional own summary model."""

from __future__ import annotations

import pytest

from agents.extensions.summary_compaction import SummaryCompactionExtension
from agents.profiles import catalog
from agents.profiles.catalog import ExtensionRow, ProfileConfigError


def built(settings: dict[str, object]) -> SummaryCompactionExtension:
    extensions = catalog.build_extensions(
        [ExtensionRow("summary_compaction", settings=settings)], persist=False
    )
    [extension] = [e for e in extensions if isinstance(e, SummaryCompactionExtension)]
    return extension


def test_the_catalog_builds_the_extension_from_validated_settings() -> None:
    extension = built({"auto": "messages", "threshold_messages": 40, "keep_last_messages": 4})

    assert extension.settings.auto == "messages"
    assert extension.settings.threshold_messages == 40
    assert extension.model is None  # the run's own model writes the summary


def test_a_configured_provider_gives_the_extension_its_own_summary_model() -> None:
    extension = built({"provider": "demo"})

    assert extension.model is not None


@pytest.mark.parametrize("settings", [{"keep_last": 2}, {"provider": "no-such-provider"}])
def test_bad_settings_are_refused(settings: dict[str, object]) -> None:
    with pytest.raises((ProfileConfigError, ValueError)):
        built(settings)
