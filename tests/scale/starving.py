"""A test extension that starves its process's event loop, as a CPU-bound or blocking call does.

Loaded into the Daphne processes of tests/scale through ZETT_EXTENSIONS
(``tests.scale.starving.LoopStarver``); the seconds come from ZETT_TEST_STARVE_SECONDS.
"""

from __future__ import annotations

import os
import time
from typing import Any

from agents.runtime import AgentExtension


class LoopStarver(AgentExtension):
    """Blocks the event loop before the first model call of every request."""

    catalog_key = "loop_starver"

    async def before_run(self, context: Any) -> None:
        time.sleep(float(os.environ.get("ZETT_TEST_STARVE_SECONDS", "0")))  # noqa: ASYNC251
