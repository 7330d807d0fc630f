"""Streamed tool-call arguments: decoding the model's JSON text, and sending it back unchanged.

Shared by the SDK adapters; it imports no SDK, so neither adapter loads the other's.
"""

from __future__ import annotations

import json
from typing import Any

#: Key holding argument text that was not a JSON object; the tool's validation then tells
#: the model what was wrong, and the text goes back to the provider as the model wrote it.
RAW_ARGUMENTS = "_raw"


def decode_arguments(text: str) -> dict[str, Any]:
    """Decode streamed tool-call arguments; anything but a JSON object becomes {"_raw": text}."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {RAW_ARGUMENTS: text}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: text}


def encode_arguments(arguments: dict[str, Any]) -> str:
    """The inverse of decode_arguments: raw text the model produced goes back unchanged."""
    if set(arguments) == {RAW_ARGUMENTS} and isinstance(arguments[RAW_ARGUMENTS], str):
        return str(arguments[RAW_ARGUMENTS])
    return json.dumps(arguments, ensure_ascii=False)
