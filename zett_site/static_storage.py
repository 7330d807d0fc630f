"""Static file names: hashed and compressed after collectstatic, plain before it."""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    """WhiteNoise's manifest storage that tolerates a checkout where collectstatic never ran.

    Then there is no manifest, WhiteNoise serves the source folders (WHITENOISE_USE_FINDERS)
    and pages link plain names, instead of every page failing on a missing manifest entry.
    """

    def stored_name(self, name: str) -> str:
        if not self.hashed_files:
            return name
        return super().stored_name(name)


__all__ = ["StaticStorage"]
