"""Admin form inputs generated from a pydantic settings model, with raw JSON as the fallback.

A settings JSON object (a profile's provider settings, an extension's settings) is edited in one
of two modes the admin picks with a radio: "Form", one input per field of the model chosen by a
sibling selector (the provider or the extension key), or "Raw JSON". Scalars get typed inputs,
enums a select, lists of scalars one item per line; a field the form cannot express (a nested
model, a mapping) gets a JSON input of its own. Whatever the mode, the value is validated with
the pydantic model and every error names its field; only values that differ from the model's
defaults are stored, so a default changed later reaches every profile that never set it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic
from django import forms
from django.core.exceptions import ValidationError
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe
from pydantic_core import to_jsonable_python

# Input kinds: what the browser shows and how its text becomes a value.
TEXT, LONG_TEXT, INTEGER, NUMBER, BOOL, CHOICE, LINES, JSON = (
    "text",
    "long_text",
    "integer",
    "number",
    "bool",
    "choice",
    "lines",
    "json",
)
_SCALARS = {"string", "integer", "number", "boolean"}
_MISSING: Any = object()  # a field without a default (it is required)

#: (label, settings model) for each key the selector can take.
Entries = Mapping[str, tuple[str, type[pydantic.BaseModel]]]


class SchemaNotRenderable(ValueError):
    """The model's JSON schema is not an object of named fields this module can show."""


@dataclass(frozen=True, slots=True)
class SchemaInput:
    """One field of a settings model as a form input."""

    name: str  # the field's name in the settings object
    kind: str  # one of the input kinds above
    help: str  # the field's description
    default: Any = _MISSING  # the default, as JSON; _MISSING when the field is required
    choices: tuple[Any, ...] = ()  # CHOICE: the allowed values
    optional: bool = False  # None is allowed
    items: str = "string"  # LINES: the JSON type of one item

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    @property
    def default_text(self) -> str:
        """The default as the admin reads it (the placeholder of an empty input)."""
        if self.required:
            return "(required)"
        if self.default is None:
            return "(none)"
        return _to_text(self, self.default) or "(empty)"


def _nullable(prop: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, bool]:
    """The one non-null alternative of an anyOf (None if several) and whether null is allowed."""
    options = prop.get("anyOf")
    if options is None:
        return prop, False
    rest = [option for option in options if option.get("type") != "null"]
    return (rest[0] if len(rest) == 1 else None), len(rest) < len(options)


def _resolve(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return defs.get(ref.removeprefix("#/$defs/"), prop)
    return prop


def _kind(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> tuple[str, tuple[Any, ...], str]:
    """(kind, choices, item type) for one property of the schema."""
    prop = _resolve(prop, defs)
    enum = prop.get("enum", [prop["const"]] if "const" in prop else None)
    if enum is not None:
        scalar = all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in enum)
        return (CHOICE, tuple(enum), "string") if scalar and enum else (JSON, (), "string")
    kind = prop.get("type")
    if kind == "string":
        long = prop.get("maxLength", 0) > 1000 or len(str(prop.get("default", ""))) > 80
        return (LONG_TEXT if long else TEXT), (), "string"
    if kind in ("integer", "number", "boolean"):
        return {"integer": INTEGER, "number": NUMBER, "boolean": BOOL}[kind], (), "string"
    if kind == "array":
        items = _resolve(prop.get("items", {}), defs)
        if items.get("type") in _SCALARS - {"boolean"} and "enum" not in items:
            return LINES, (), items["type"]
    return JSON, (), "string"


def describe_inputs(model: type[pydantic.BaseModel]) -> tuple[SchemaInput, ...]:
    """One input per field of the model, in declaration order; SchemaNotRenderable if none fit."""
    try:
        schema = model.model_json_schema()
    except Exception as exc:  # pydantic raises several kinds for types without a JSON schema
        raise SchemaNotRenderable(f"no JSON schema: {exc}") from None
    properties = schema.get("properties", {})
    if schema.get("type") != "object" or not isinstance(properties, dict):
        raise SchemaNotRenderable("the settings are not an object of named fields")
    defs = schema.get("$defs", {})
    inputs = []
    for name, model_field in model.model_fields.items():
        key = model_field.alias or name
        prop = properties.get(key)
        if prop is None:
            raise SchemaNotRenderable(f"{key} is missing from the schema")
        inner, optional = _nullable(prop)
        kind, choices, items = _kind(inner, defs) if inner is not None else (JSON, (), "string")
        if kind == BOOL and optional:
            kind, choices = CHOICE, (True, False)
        default = (
            _MISSING
            if model_field.is_required()
            else to_jsonable_python(model_field.get_default(call_default_factory=True))
        )
        help_text = prop.get("description") or model_field.description or ""
        inputs.append(SchemaInput(key, kind, help_text, default, choices, optional, items))
    return tuple(inputs)


# -- text <-> values ---------------------------------------------------------------------------


def _number(text: str, integer_only: bool) -> Any:
    """The number the text spells, or the text itself (pydantic then names the problem)."""
    try:
        return int(text)
    except ValueError:
        pass
    if integer_only:
        return text
    try:
        return float(text)
    except ValueError:
        return text


def _to_text(spec: SchemaInput, value: Any) -> str:
    """What an input shows for a value."""
    if value is None:
        return ""
    if spec.kind in (TEXT, LONG_TEXT):
        return value if isinstance(value, str) else json.dumps(value)
    if spec.kind == CHOICE:
        return _choice_token(value)
    if spec.kind == LINES and isinstance(value, list):
        return "\n".join(item if isinstance(item, str) else json.dumps(item) for item in value)
    if spec.kind == BOOL:
        return "on" if value else ""
    return json.dumps(value)


def _choice_token(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


@dataclass(frozen=True, slots=True)
class _Unset:
    """An empty input: the field keeps its default."""


UNSET = _Unset()


def _from_text(spec: SchemaInput, text: str | None) -> Any:
    """The value an input's text means, UNSET for an empty one; ValueError for bad JSON."""
    if spec.kind == BOOL:
        return text not in (None, "")
    if text is None or not text.strip():
        return UNSET
    if spec.kind == TEXT:
        return text.strip()
    if spec.kind == LONG_TEXT:
        return text.replace("\r\n", "\n")
    if spec.kind in (INTEGER, NUMBER):
        return _number(text.strip(), spec.kind == INTEGER)
    if spec.kind == CHOICE:
        for choice in spec.choices:
            if _choice_token(choice) == text:
                return choice
        return text  # not one of the choices: pydantic says which are allowed
    if spec.kind == LINES:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if spec.items in ("integer", "number"):
            return [_number(line, spec.items == "integer") for line in lines]
        return lines
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg}, line {exc.lineno})") from None


def inputs_from_settings(inputs: tuple[SchemaInput, ...], settings: Mapping[str, Any]) -> dict:
    """Each input's text for stored settings (an empty text for a field left at its default)."""
    texts = {}
    for spec in inputs:
        if spec.name in settings:
            texts[spec.name] = _to_text(spec, settings[spec.name])
        elif spec.kind == BOOL and not spec.required:
            texts[spec.name] = _to_text(spec, spec.default)
        else:
            texts[spec.name] = ""
    return texts


def settings_from_inputs(
    inputs: tuple[SchemaInput, ...], texts: Mapping[str, str | None]
) -> tuple[dict[str, Any], list[str]]:
    """(the settings the inputs spell, "field: problem" for each input that is not even JSON)."""
    settings: dict[str, Any] = {}
    problems = []
    for spec in inputs:
        try:
            value = _from_text(spec, texts.get(spec.name))
        except ValueError as exc:
            problems.append(f"{spec.name}: {exc}")
            continue
        if value is not UNSET:
            settings[spec.name] = value
    return settings, problems


def without_defaults(inputs: tuple[SchemaInput, ...], settings: Mapping[str, Any]) -> dict:
    """The settings minus every value equal to its field's default."""
    defaults = {spec.name: spec.default for spec in inputs}
    return {
        name: value
        for name, value in settings.items()
        if name not in defaults or defaults[name] is _MISSING or defaults[name] != value
    }


def representable(inputs: tuple[SchemaInput, ...], settings: Any) -> bool:
    """True if saving the form unchanged stores these settings (less their defaults) again."""
    if not isinstance(settings, Mapping):
        return False
    if set(settings) - {spec.name for spec in inputs}:
        return False
    texts = inputs_from_settings(inputs, settings)
    again, problems = settings_from_inputs(inputs, texts)
    return not problems and without_defaults(inputs, again) == without_defaults(inputs, settings)


def validate(
    model: type[pydantic.BaseModel], inputs: tuple[SchemaInput, ...] | None, raw: Any
) -> dict[str, Any]:
    """The settings to store: validated, typed as the model dumps them, defaults left out.

    Raises ValidationError with one "field: message" per problem.
    """
    if not isinstance(raw, Mapping):
        raise ValidationError("Settings must be a JSON object.")
    try:
        parsed = model.model_validate(dict(raw))
    except pydantic.ValidationError as exc:
        raise ValidationError(
            [
                ValidationError(
                    f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
                )
                for err in exc.errors()
            ]
        ) from None
    dumped = parsed.model_dump(mode="json", by_alias=True)
    typed = {name: dumped.get(name, value) for name, value in raw.items()}
    return without_defaults(inputs, typed) if inputs is not None else typed


# -- the widget and the form field -------------------------------------------------------------


@dataclass(slots=True)
class SchemaValue:
    """What the browser posted: the mode, the selected key, the raw text and every input."""

    mode: str  # "form" or "raw"
    key: str | None  # the selector's value (provider or extension key)
    raw: str | None  # the raw JSON text
    fields: dict[str, dict[str, str | None]] = field(default_factory=dict)  # key -> name -> text


@functools.cache
def _inputs_or_none(model: type[pydantic.BaseModel]) -> tuple[SchemaInput, ...] | None:
    try:
        return describe_inputs(model)
    except SchemaNotRenderable:
        return None


class SchemaSettingsWidget(forms.Widget):
    """Form / Raw JSON editor of a settings object whose model a sibling field selects.

    The raw JSON textarea carries the field's own name, so a plain post of JSON text (no mode)
    is read as raw JSON. ``selector_name`` is the full name of the sibling field (set by the
    form, prefix included); ``current_key`` its saved value, for an unbound form.
    """

    template_name = "admin/agents/schema_settings.html"

    class Media:
        css = {"all": ("admin_schema.css",)}
        js = ("admin_schema.js",)

    def __init__(
        self,
        entries: Callable[[], Entries],
        selector_field: str,
        noun: str,
        attrs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(attrs)
        self.entries = entries
        self.selector_field = selector_field  # the sibling field's name, without prefix
        self.selector_name = selector_field
        self.current_key: str | None = None
        self.noun = noun  # "provider" or "extension", for the notes

    def value_from_datadict(self, data: Any, files: Any, name: str) -> SchemaValue:
        mode = data.get(f"{name}__mode")
        key = data.get(self.selector_name)
        fields = {}
        for entry_key, (_label, model) in self.entries().items():
            inputs = _inputs_or_none(model) or ()
            fields[entry_key] = {
                spec.name: data.get(f"{name}__{entry_key}__{spec.name}") for spec in inputs
            }
        return SchemaValue("form" if mode == "form" else "raw", key, data.get(name), fields)

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return name not in data and f"{name}__mode" not in data

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, None, attrs)
        entries = self.entries()
        bound = isinstance(value, SchemaValue)
        first = next(iter(entries), None)
        selected = (value.key if bound else self.current_key) or first
        sets = []
        for key, (label, model) in entries.items():
            inputs = _inputs_or_none(model)
            if inputs is None:
                texts: dict[str, Any] = {}
            elif bound:
                texts = {spec.name: value.fields.get(key, {}).get(spec.name) for spec in inputs}
                posted_raw_only = texts and all(text is None for text in texts.values())
                if posted_raw_only and key == value.key:
                    texts = inputs_from_settings(inputs, _loads_object(value.raw) or {})
            elif key == selected and isinstance(value, Mapping):
                texts = inputs_from_settings(inputs, value)
            else:
                texts = inputs_from_settings(inputs, {})
            sets.append(
                {
                    "key": key,
                    "label": label,
                    "about": ((model.__doc__ or "").strip().splitlines() or [""])[0],
                    "renderable": inputs is not None,
                    "hidden": key != selected,
                    "inputs": [
                        _input_context(name, key, spec, texts.get(spec.name) or "")
                        for spec in inputs or ()
                    ],
                }
            )
        selected_inputs = _inputs_or_none(entries[selected][1]) if selected in entries else None
        form_possible = selected_inputs is not None
        if bound:
            mode = value.mode if form_possible else "raw"
            raw_text = value.raw if value.raw is not None else ""
        else:
            stored = value if isinstance(value, Mapping) else _loads_object(value)
            raw_text = json.dumps(stored if stored is not None else {}, indent=2)
            fits = form_possible and representable(selected_inputs, stored or {})
            mode = "form" if fits else "raw"
        context["schema"] = {
            "name": name,
            "id": (attrs or {}).get("id") or f"id_{name}",
            "mode": mode,
            "raw": raw_text,
            "sets": sets,
            "selector_field": self.selector_field,
            "field_name": name.rpartition("-")[2],
            "unknown_key": selected if selected not in entries else None,
            "unrenderable": selected in entries and not form_possible,
            "noun": self.noun,
        }
        return context

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        # The project template folder, which the default form renderer does not search.
        return mark_safe(render_to_string(self.template_name, self.get_context(name, value, attrs)))


def _loads_object(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text or "{}")
    except json.JSONDecodeError:
        return None


def _input_context(name: str, key: str, spec: SchemaInput, text: str) -> dict[str, Any]:
    html_name = f"{name}__{key}__{spec.name}"
    choices = [_choice_token(choice) for choice in spec.choices]
    return {
        "spec": spec,
        "html_name": html_name,
        "id": f"id_{html_name}",
        "text": text,
        "checked": text not in ("", None),
        "choices": choices,
        "placeholder": spec.default_text,
    }


class SchemaSettingsField(forms.Field):
    """A settings object edited through SchemaSettingsWidget; cleans to the dict to store."""

    def __init__(
        self, *, entries: Callable[[], Entries], selector_field: str, noun: str, **kwargs: Any
    ) -> None:
        self.entries = entries
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", SchemaSettingsWidget(entries, selector_field, noun))
        super().__init__(**kwargs)

    def bind_selector(self, selector_name: str, current_key: str | None) -> None:
        """Tell the widget the sibling field's full name and saved value (one form's copy)."""
        self.widget.selector_name = selector_name
        self.widget.current_key = current_key

    def clean(self, value: Any) -> dict[str, Any]:
        if value is None or isinstance(value, Mapping):  # an initial value, already stored
            return dict(value or {})
        if not isinstance(value, SchemaValue):
            value = SchemaValue("raw", None, str(value))
        entry = self.entries().get(value.key or "")
        inputs = _inputs_or_none(entry[1]) if entry else None
        if value.mode == "form" and inputs is not None:
            raw, problems = settings_from_inputs(inputs, value.fields.get(value.key or "", {}))
            if problems:  # report the other fields' problems with them, not one at a time
                try:
                    validate(entry[1], inputs, raw)
                except ValidationError as exc:
                    bad = {problem.partition(":")[0] for problem in problems}
                    problems += [m for m in exc.messages if m.partition(":")[0] not in bad]
                raise ValidationError([ValidationError(p) for p in problems])
        else:
            text = (value.raw or "").strip() or "{}"
            try:
                raw = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValidationError(f"Enter valid JSON ({exc.msg}, line {exc.lineno}).") from None
        if entry is None:  # unknown key: the form says so; keep the object as given
            if not isinstance(raw, dict):
                raise ValidationError("Settings must be a JSON object.")
            return raw
        return validate(entry[1], inputs, raw)

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.clean(data) != (initial or {})
        except ValidationError:
            return True
