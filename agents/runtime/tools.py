"""Tools: definitions the model sees, and the local executors behind them."""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import pydantic

_TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


@dataclass(slots=True, frozen=True)
class ToolDefinition:
    """A local tool as offered to the model: name, description and JSON schema."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _TOOL_NAME.match(self.name):
            raise ValueError(
                f"invalid tool name {self.name!r}: use letters, digits, '_', '.', '-' "
                "(at most 64, not starting with a digit)"
            )


@dataclass(slots=True, frozen=True)
class ServerToolDefinition:
    """A provider-hosted tool (web search, code execution): no local executor."""

    type: str  # the provider's wire discriminator, unique per request
    configuration: Mapping[str, Any] = field(default_factory=dict)  # opaque to the runtime

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not self.type:
            raise ValueError("ServerToolDefinition.type must be a non-empty string")


@dataclass(slots=True)
class ToolResult:
    """What a tool handler (or an on_tool_call layer) returns for one call."""

    content: str
    is_error: bool = False
    data: Any = None  # the handler's raw return value, for extensions
    attributes: dict[str, Any] = field(default_factory=dict)  # copied onto the ToolMessage

    @classmethod
    def from_value(cls, value: Any) -> ToolResult:
        if isinstance(value, ToolResult):
            return value
        if isinstance(value, str):
            return cls(content=value, data=value)
        if isinstance(value, pydantic.BaseModel):
            return cls(content=value.model_dump_json(), data=value)
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = str(value)
        return cls(content=text, data=value)


def validation_problems(
    exc: pydantic.ValidationError, whole: str = "settings"
) -> list[tuple[str, str]]:
    """(field path, message) per error; ``whole`` names an error of the object itself."""
    return [(".".join(str(p) for p in err["loc"]) or whole, err["msg"]) for err in exc.errors()]


def describe_validation(exc: pydantic.ValidationError, whole: str = "settings") -> str:
    """A pydantic error as "field: message; field: message"."""
    return "; ".join(f"{field}: {message}" for field, message in validation_problems(exc, whole))


class ToolArgumentsError(ValueError):
    """The model's arguments do not match the tool's schema."""


class UnknownToolError(LookupError):
    """The model called a tool this request has not registered.

    ``str(error)`` names the tools the model may call, so the failed ToolMessage
    built from it tells the model how to recover.
    """

    def __init__(self, name: str, available: Sequence[str]) -> None:
        self.name = name  # what the model asked for
        self.available = tuple(available)  # the request's local tools, sorted
        offer = ", ".join(self.available) if self.available else "none"
        super().__init__(f"unknown tool {name!r}; the tools you may call are: {offer}")


Handler = Callable[..., Any]


class AgentTool:
    """A named local tool: its definition plus an executor validating arguments."""

    __slots__ = ("_handler", "_is_async", "_validator", "definition")

    def __init__(
        self,
        name: str,
        handler: Handler,
        *,
        description: str = "",
        parameters: Mapping[str, Any] | None = None,
        validator: type[pydantic.BaseModel] | None = None,
    ) -> None:
        self.definition = ToolDefinition(
            name=name,
            description=description,
            parameters=copy.deepcopy(dict(parameters))
            if parameters is not None
            else {"type": "object", "properties": {}},
        )
        self._handler = handler
        self._validator = validator
        self._is_async = inspect.iscoroutinefunction(handler)

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def description(self) -> str:
        return self.definition.description

    @property
    def parameters(self) -> Mapping[str, Any]:
        return self.definition.parameters

    def copy(self) -> AgentTool:
        """A registration-safe copy: the schema is deep-copied, the handler shared."""
        duplicate = AgentTool.__new__(AgentTool)
        duplicate.definition = ToolDefinition(
            name=self.definition.name,
            description=self.definition.description,
            parameters=copy.deepcopy(dict(self.definition.parameters)),
        )
        duplicate._handler = self._handler
        duplicate._validator = self._validator
        duplicate._is_async = self._is_async
        return duplicate

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Return keyword arguments for the handler or raise ToolArgumentsError."""
        if not isinstance(arguments, Mapping):
            raise ToolArgumentsError("arguments must be a JSON object")
        if self._validator is None:
            return dict(arguments)
        try:
            parsed = self._validator.model_validate(dict(arguments))
        except pydantic.ValidationError as exc:
            problems = describe_validation(exc, "arguments")
            raise ToolArgumentsError(f"invalid arguments for {self.name}: {problems}") from None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    async def __call__(self, arguments: Mapping[str, Any]) -> ToolResult:
        """Validate, run (sync handlers in a worker thread) and wrap the result."""
        kwargs = self.validate(arguments)
        if self._is_async:
            value = await self._handler(**kwargs)
        else:
            value = await asyncio.to_thread(self._handler, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        return ToolResult.from_value(value)

    def __repr__(self) -> str:
        return f"AgentTool({self.name!r})"


def _build_tool(func: Handler, name: str | None, description: str | None) -> AgentTool:
    signature = inspect.signature(func)
    try:
        hints = inspect.get_annotations(func, eval_str=True)
    except Exception as exc:  # unresolved forward references
        raise TypeError(f"cannot resolve annotations of {func.__qualname__}: {exc}") from exc
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"@tool {func.__qualname__}: *args and **kwargs are not supported")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    model_name = "".join(part.title() for part in (name or func.__name__).split("_")) + "Args"
    validator = pydantic.create_model(
        model_name, __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    schema = validator.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    doc = inspect.getdoc(func) or ""
    return AgentTool(
        name or func.__name__,
        func,
        description=description if description is not None else doc,
        parameters=schema,
        validator=validator,
    )


@overload
def tool(func: Handler, /) -> AgentTool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Handler], AgentTool]: ...


def tool(
    func: Handler | None = None, /, *, name: str | None = None, description: str | None = None
) -> AgentTool | Callable[[Handler], AgentTool]:
    """Turn a typed function (sync or async) into an AgentTool.

    The JSON schema comes from the signature's annotations; the docstring becomes
    the description. Arguments are validated with pydantic before the call, and
    unknown arguments are rejected.
    """
    if func is not None:
        return _build_tool(func, name, description)

    def decorate(inner: Handler) -> AgentTool:
        return _build_tool(inner, name, description)

    return decorate
