"""The demo tools: a safe calculator, a clock and a timer, and an extension registering them."""

from __future__ import annotations

import ast
import asyncio
import datetime as dt
import math
import operator
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..runtime.extension import AgentExtension
from ..runtime.tools import AgentTool, tool

if TYPE_CHECKING:
    from ..runtime.context import AgentRunContext

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_EXPONENT = 1000
_MAX_LENGTH = 200
# Results are bounded in size, not only exponents: (2**999)**999 has a million bits.
_MAX_RESULT_BITS = 4096


def evaluate(expression: str) -> int | float:
    """Evaluate arithmetic (numbers, + - * / // % **, parentheses) without eval()."""
    if len(expression) > _MAX_LENGTH:
        raise ValueError(f"expression longer than {_MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.replace("^", "**").replace("×", "*"), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None

    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow):
                if abs(right) > _MAX_EXPONENT:
                    raise ValueError("exponent too large")
                if abs(left) > 1 and abs(right) * math.log2(abs(left)) > _MAX_RESULT_BITS:
                    raise ValueError("the result would be too large")
            elif isinstance(node.op, ast.Mult) and _bits(left) + _bits(right) > _MAX_RESULT_BITS:
                raise ValueError("the result would be too large")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))
        raise ValueError(f"unsupported element in expression: {ast.dump(node)[:40]}")

    try:
        value = walk(tree)
    except ZeroDivisionError:
        raise ValueError("division by zero") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("the result is not a finite number")
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
    return value


def _bits(value: int | float) -> float:
    return math.log2(abs(value)) if abs(value) > 1 else 0.0


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression, e.g. "2 * (3 + 4)". Supports + - * / // % **."""
    return str(evaluate(expression))


@tool
def clock(timezone: str = "UTC") -> str:
    """Return the current date and time in an IANA time zone such as "Europe/Berlin"."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {timezone!r}") from None
    return dt.datetime.now(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


MAX_WAIT_SECONDS = 60.0


@tool
async def wait(seconds: float) -> str:
    """Wait the given number of seconds (at most 60), like a slow tool would, then say so."""
    if not 0 <= seconds <= MAX_WAIT_SECONDS:
        raise ValueError(f"seconds must be between 0 and {MAX_WAIT_SECONDS:g}")
    await asyncio.sleep(seconds)  # async: a thousand waiting runs hold no threads
    return f"waited {seconds:g} s"


DEMO_TOOLS: tuple[AgentTool, ...] = (calculator, clock, wait)


class DemoToolsExtension(AgentExtension):
    """Registers the chosen demo tools (by default the calculator and clock) for every request."""

    def __init__(self, tools: tuple[str, ...] = ("calculator", "clock")) -> None:
        known = {t.name: t for t in DEMO_TOOLS}
        unknown = sorted(set(tools) - set(known))
        if unknown:
            raise ValueError(f"unknown demo tools: {', '.join(unknown)}")
        self._tools = tuple(known[name] for name in tools)

    async def on_tool(self, context: AgentRunContext) -> None:
        for registered in self._tools:
            if registered.name not in context.tools:
                context.register_tool(registered)
