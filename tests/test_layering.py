"""The runtime layers import no Django and (for the core) no provider SDK."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys

    package = importlib.import_module({package!r})
    imported = [package.__name__]
    for info in pkgutil.walk_packages(getattr(package, "__path__", []), package.__name__ + "."):
        importlib.import_module(info.name)
        imported.append(info.name)
    forbidden = sorted(
        name for name in sys.modules
        if name.split(".")[0] in {forbidden!r}
    )
    print(json.dumps({{"imported": imported, "forbidden": forbidden}}))
    """
)


def _import_in_fresh_interpreter(package: str, forbidden: set[str]) -> dict[str, list[str]]:
    import json

    code = PROBE.format(package=package, forbidden=sorted(forbidden))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("agents.runtime", {"django", "channels", "daphne", "openai", "anthropic"}),
        ("agents.extensions", {"django", "channels", "daphne"}),
        ("agents.providers", {"django", "channels", "daphne"}),
    ],
)
def test_layer_imports_nothing_forbidden(package: str, forbidden: set[str]) -> None:
    outcome = _import_in_fresh_interpreter(package, forbidden)
    assert outcome["forbidden"] == [], f"{package} pulled in {outcome['forbidden']}"


def test_probe_walks_submodules_and_reports_forbidden_ones() -> None:
    # Guards the probe itself, so an empty "forbidden" above means something.
    runtime = _import_in_fresh_interpreter("agents.runtime", {"agents"})
    assert len(runtime["imported"]) > 1
    assert "agents.runtime" in runtime["forbidden"]
