"""Layering: the runtime layers import no Django or SDK, and no package breaks its "never"."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

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


# -- the "nevers" between packages, read from the source ---------------------------------------

AGENTS_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Import:
    """One import statement's target, resolved to an absolute module name."""

    source: str  # the importing module
    target: str  # the imported module (for `from x import y`: x, and x.y when y is a module)
    where: str  # path:line, relative to the project root


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@functools.cache
def _bound_by_package(name: str, root: Path) -> frozenset[str]:
    """Names a package's __init__ binds to something other than its own submodule.

    ``from pkg import x`` then means that object (as Python resolves it), not ``pkg.x``.
    """
    init = root.joinpath(*name.split("."), "__init__.py")
    if not init.is_file():
        return frozenset()
    bound: set[str] = set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.ImportFrom) and not (node.level == 1 and node.module is None):
            bound.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            bound.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(bound)


def imports_of(path: Path, root: Path) -> Iterator[Import]:
    """Every import in a file, at any depth (function-level and TYPE_CHECKING ones too)."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    relative = path.relative_to(root).as_posix()
    for node in ast.walk(tree):
        where = f"{relative}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, where)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            yield Import(module, base, where)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if _is_module(submodule, root) and alias.name not in _bound_by_package(base, root):
                    yield Import(module, submodule, where)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _ours_except(*allowed: str) -> Callable[[str], bool]:
    return lambda target: (
        _within(target, "agents") and not any(_within(target, package) for package in allowed)
    )


def _any_of(*packages: str) -> Callable[[str], bool]:
    return lambda target: any(_within(target, package) for package in packages)


# (importing package, which targets it must never import, the rule in words)
NEVERS: list[tuple[str, Callable[[str], bool], str]] = [
    ("agents.runtime", _ours_except("agents.runtime"), "imports nothing of agents outside itself"),
    (
        "agents.extensions",
        _ours_except("agents.extensions", "agents.runtime"),
        "imports only runtime",
    ),
    (
        "agents.providers",
        _ours_except("agents.providers", "agents.runtime"),
        "imports only runtime",
    ),
    ("agents.hosting", _any_of("agents.web"), "never imports agents.web"),
    (
        "agents.web",
        lambda target: _within(target, "agents.hosting") and target != "agents.hosting",
        "reaches hosting only through its face, agents.hosting",
    ),
    ("agents.profiles", _any_of("agents.hosting"), "never imports agents.hosting"),
    (
        "agents.session_store",
        _any_of("agents.hosting", "agents.web", "agents.profiles"),
        "never imports hosting, web or profiles",
    ),
    (
        "agents.observability",
        _any_of("agents.hosting", "agents.web"),
        "never imports hosting or web (they call it)",
    ),
]


def _sources(package: str, root: Path) -> list[Path]:
    path = root.joinpath(*package.split("."))
    if path.with_suffix(".py").is_file():
        return [path.with_suffix(".py")]
    return sorted(path.rglob("*.py"))


def violations(package: str, forbidden: Callable[[str], bool], root: Path) -> list[str]:
    return [
        f"{found.where}: {found.source} imports {found.target}"
        for path in _sources(package, root)
        for found in imports_of(path, root)
        if forbidden(found.target)
    ]


# Broken by today's code; strict, so the fix turns this red until the mark is removed.
KNOWN_BROKEN: dict[str, str] = {}  # package -> why its never is broken today (none)


@pytest.mark.parametrize(
    ("package", "forbidden", "rule"),
    [
        pytest.param(
            package,
            forbidden,
            rule,
            id=package,
            marks=[pytest.mark.xfail(reason=KNOWN_BROKEN[package], strict=True)]
            if package in KNOWN_BROKEN
            else [],
        )
        for package, forbidden, rule in NEVERS
    ],
)
def test_package_keeps_its_never(package: str, forbidden: Callable[[str], bool], rule: str) -> None:
    assert _sources(package, AGENTS_ROOT), f"{package} has no source files: the rule checks nothing"
    broken = violations(package, forbidden, AGENTS_ROOT)
    assert broken == [], f"{package} {rule}:\n" + "\n".join(broken)


def test_import_reader_finds_nested_relative_and_submodule_imports(tmp_path: Path) -> None:
    # Guards the reader itself, so an empty list above means something.
    hosting = tmp_path / "agents" / "hosting"
    web = tmp_path / "agents" / "web"
    for package in (tmp_path / "agents", hosting, web):
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text("")
    (hosting / "db.py").write_text("")
    (hosting / "watch.py").write_text("def watch(): ...\n")
    (hosting / "__init__.py").write_text("from .watch import watch\n")
    (web / "views.py").write_text(
        "from ..hosting import Snapshot, watch  # the face's function, not the module\n"
        "def page():\n"
        "    from ..hosting import db\n"
        "    import agents.hosting.db\n"
    )
    web_rule = next(forbidden for package, forbidden, _ in NEVERS if package == "agents.web")
    broken = violations("agents.web", web_rule, tmp_path)
    assert broken == [
        "agents/web/views.py:3: agents.web.views imports agents.hosting.db",
        "agents/web/views.py:4: agents.web.views imports agents.hosting.db",
    ]
