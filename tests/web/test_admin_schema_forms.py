"""Settings forms generated from pydantic models: typed values, choices, errors, raw JSON."""

from __future__ import annotations

import re
from typing import Any

import pydantic
import pytest
from django.test import Client

from agents.admin_schema import (
    SchemaNotRenderable,
    SchemaSettingsWidget,
    describe_inputs,
)
from agents.models import AgentProfile, ExtensionSetting

ADD_URL = "/admin/agents/agentprofile/add/"


def _post(
    provider: str = "demo",
    provider_mode: str = "form",
    provider_fields: dict[str, str] | None = None,
    provider_raw: str = "{}",
    extensions: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    """The POST of the profile add page, settings in the given modes."""
    data: dict[str, Any] = {
        "name": "Support bot",
        "slug": "support-bot",
        "description": "",
        "provider": provider,
        "model_name": "gpt-test",
        "provider_settings__mode": provider_mode,
        "provider_settings": provider_raw,
        "system_prompt": "Be brief.",
        "max_iterations": "10",
        "double_texting": "steer",
        "is_active": "on",
        "extensions-TOTAL_FORMS": str(len(extensions)),
        "extensions-INITIAL_FORMS": "0",
        "extensions-MIN_NUM_FORMS": "0",
        "extensions-MAX_NUM_FORMS": "1000",
    }
    for name, text in (provider_fields or {}).items():
        data[f"provider_settings__{provider}__{name}"] = text
    for index, row in enumerate(extensions):
        prefix = f"extensions-{index}"
        data[f"{prefix}-key"] = row["key"]
        data[f"{prefix}-instance_name"] = ""
        data[f"{prefix}-enabled"] = "on"
        data[f"{prefix}-priority"] = "100"
        data[f"{prefix}-position"] = str(index)
        data[f"{prefix}-settings__mode"] = row.get("mode", "form")
        data[f"{prefix}-settings"] = row.get("raw", "{}")
        for name, text in row.get("fields", {}).items():
            data[f"{prefix}-settings__{row['key']}__{name}"] = text
    return data


def _body(response: Any) -> str:
    return response.content.decode()


@pytest.mark.django_db
def test_form_mode_saves_typed_values(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        _post(
            provider="openai",
            provider_fields={
                "base_url": "http://localhost:11434/v1",
                "timeout": "30",
                "max_retries": "3",
                "temperature": "0.5",
                "max_tokens": "",
                "extra_headers": '{"X-Team": "support"}',
            },
            extensions=[
                {"key": "tool_approval", "fields": {"tools": "calc*\n\n  clock  \n"}},
                {
                    "key": "summary_compaction",
                    "fields": {"auto": "never", "keep_last_messages": "4"},
                },
            ],
        ),
    )
    assert response.status_code == 302, _body(response)
    profile = AgentProfile.objects.get(slug="support-bot")
    assert profile.provider_settings == {
        "base_url": "http://localhost:11434/v1",
        "timeout": 30.0,
        "max_retries": 3,
        "temperature": 0.5,
        "extra_headers": {"X-Team": "support"},
    }
    assert isinstance(profile.provider_settings["max_retries"], int)
    assert isinstance(profile.provider_settings["timeout"], float)
    settings = dict(profile.extensions.values_list("key", "settings"))
    assert settings == {
        "tool_approval": {"tools": ["calc*", "clock"]},
        "summary_compaction": {"auto": "never", "keep_last_messages": 4},
    }


@pytest.mark.django_db
def test_a_checkbox_and_a_required_list_become_typed_values(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        _post(
            provider="scripted",
            provider_fields={"responses": "Hello.\nGoodbye.", "repeat_last": "on", "delay": ""},
        ),
    )
    assert response.status_code == 302, _body(response)
    profile = AgentProfile.objects.get(slug="support-bot")
    assert profile.provider_settings == {"responses": ["Hello.", "Goodbye."], "repeat_last": True}


@pytest.mark.django_db
def test_only_the_selected_providers_inputs_are_read(admin_client: Client) -> None:
    data = _post(provider="demo", provider_fields={"delay": "0"})
    data["provider_settings__openai__timeout"] = "not even a number"  # another provider's set
    response = admin_client.post(ADD_URL, data)
    assert response.status_code == 302, _body(response)
    assert AgentProfile.objects.get(slug="support-bot").provider_settings == {"delay": 0.0}


@pytest.mark.django_db
def test_enum_is_a_select_listing_its_choices(admin_client: Client) -> None:
    profile = AgentProfile.objects.create(name="P", slug="p", provider="demo")
    ExtensionSetting.objects.create(profile=profile, key="summary_compaction", settings={})
    body = _body(admin_client.get(f"/admin/agents/agentprofile/{profile.pk}/change/"))
    select = re.search(
        r'<select name="extensions-0-settings__summary_compaction__auto"[^>]*>(.*?)</select>',
        body,
        re.S,
    )
    assert select is not None
    values = re.findall(r'<option value="([^"]*)"', select.group(1))
    assert values == ["", "tokens", "messages", "never"]
    assert "default (tokens)" in select.group(1)


@pytest.mark.django_db
def test_a_bad_value_names_its_field_and_nothing_is_saved(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        _post(
            provider="openai",
            provider_fields={"max_retries": "many", "extra_headers": "{not json"},
            extensions=[{"key": "ask_user", "fields": {"timeout_seconds": "-5"}}],
        ),
    )
    assert response.status_code == 200
    body = _body(response)
    assert "timeout_seconds: Input should be greater than 0" in body
    assert "max_retries: Input should be a valid integer" in body
    assert "extra_headers: not valid JSON" in body
    assert not AgentProfile.objects.exists()
    assert not ExtensionSetting.objects.exists()
    # The page comes back in form mode with what was typed, so it can be corrected.
    assert 'name="extensions-0-settings__ask_user__timeout_seconds"' in body
    assert 'value="-5"' in body and 'value="many"' in body


@pytest.mark.django_db
def test_raw_json_mode_still_works_and_wins_over_the_inputs(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        _post(
            provider="demo",
            provider_mode="raw",
            provider_raw='{"reply_words": 12}',
            provider_fields={"delay": "1"},  # ignored: the raw mode is chosen
            extensions=[
                {"key": "ask_user", "mode": "raw", "raw": '{"timeout_seconds": 45}'},
            ],
        ),
    )
    assert response.status_code == 302, _body(response)
    profile = AgentProfile.objects.get(slug="support-bot")
    assert profile.provider_settings == {"reply_words": 12}
    assert profile.extensions.get().settings == {"timeout_seconds": 45.0}


@pytest.mark.django_db
def test_raw_json_errors_are_named_too(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        _post(provider="demo", provider_mode="raw", provider_raw='{"delay": 9, "dely": 1}'),
    )
    assert response.status_code == 200
    body = _body(response)
    assert "delay: Input should be less than or equal to 5" in body
    assert "dely: Extra inputs are not permitted" in body
    response = admin_client.post(ADD_URL, _post(provider_mode="raw", provider_raw="[1,"))
    assert "Enter valid JSON" in _body(response)
    assert not AgentProfile.objects.exists()


@pytest.mark.django_db
def test_defaults_are_not_stored(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        _post(
            provider="openai",
            provider_fields={"timeout": "60", "api_key_env": "OPENAI_API_KEY", "max_retries": "2"},
            extensions=[
                {"key": "tool_approval", "fields": {"tools": "*", "timeout_seconds": "300"}},
                {"key": "ask_user", "mode": "raw", "raw": '{"timeout_seconds": 600}'},
            ],
        ),
    )
    assert response.status_code == 302, _body(response)
    profile = AgentProfile.objects.get(slug="support-bot")
    assert profile.provider_settings == {}
    assert list(profile.extensions.values_list("settings", flat=True)) == [{}, {}]


@pytest.mark.django_db
def test_help_text_and_defaults_are_rendered(admin_client: Client) -> None:
    profile = AgentProfile.objects.create(
        name="P", slug="p", provider="openai", model_name="m", provider_settings={"timeout": 30}
    )
    ExtensionSetting.objects.create(profile=profile, key="tool_approval")
    body = _body(admin_client.get(f"/admin/agents/agentprofile/{profile.pk}/change/"))
    # Field descriptions as help, defaults as placeholders, stored values as values.
    assert "Seconds to wait for the next data event (keep-alives do not count)." in body
    assert "How long a call waits for a decision" in body
    assert re.search(
        r'name="provider_settings__openai__timeout"[^>]*value="30"[^>]*placeholder="60.0"', body
    )
    assert re.search(
        r'name="extensions-0-settings__tool_approval__tools"[^>]*placeholder="\*"', body
    )
    # The saved provider's set is shown and the others hidden; the form mode is chosen.
    assert re.search(r'class="zett-schema-set" data-schema-key="openai">', body)
    assert re.search(r'class="zett-schema-set" data-schema-key="demo" hidden>', body)
    assert re.search(r'name="provider_settings__mode" value="form"[^>]*checked', body)


@pytest.mark.django_db
def test_settings_the_form_cannot_hold_open_in_raw_mode(admin_client: Client) -> None:
    profile = AgentProfile.objects.create(name="P", slug="p", provider="demo")
    # An empty list reads as "use the default" in the form, so the form would change it.
    ExtensionSetting.objects.create(profile=profile, key="tool_approval", settings={"tools": []})
    body = _body(admin_client.get(f"/admin/agents/agentprofile/{profile.pk}/change/"))
    assert re.search(r'name="extensions-0-settings__mode" value="raw"[^>]*checked', body)
    assert re.search(r'name="provider_settings__mode" value="form"[^>]*checked', body)


@pytest.mark.django_db
def test_an_unknown_extension_key_is_raw_json_only_with_a_note(admin_client: Client) -> None:
    profile = AgentProfile.objects.create(name="P", slug="p", provider="demo")
    ExtensionSetting.objects.create(profile=profile, key="retired_plugin", settings={"x": 1})
    body = _body(admin_client.get(f"/admin/agents/agentprofile/{profile.pk}/change/"))
    assert "Unknown extension “retired_plugin”" in body
    assert re.search(r'name="extensions-0-settings__mode" value="form"[^>]*disabled', body)
    assert re.search(r'name="extensions-0-settings__mode" value="raw"[^>]*checked', body)
    assert "&quot;x&quot;: 1" in body


class _Opaque:
    """A type pydantic can validate but not describe in a JSON schema."""


class _OpaqueSettings(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    thing: _Opaque | None = None


class _NestedSettings(pydantic.BaseModel):
    class Inner(pydantic.BaseModel):
        size: int = 1

    inner: Inner = pydantic.Field(default_factory=Inner, description="A nested model.")
    label: str = "x"


def test_a_schema_that_cannot_be_rendered_is_raw_json_only_with_a_note() -> None:
    with pytest.raises(SchemaNotRenderable):
        describe_inputs(_OpaqueSettings)
    widget = SchemaSettingsWidget(lambda: {"odd": ("Odd", _OpaqueSettings)}, "key", "extension")
    widget.current_key = "odd"
    html = widget.render("settings", {})
    assert "settings model cannot be shown as a form" in html
    assert re.search(r'value="form"[^>]*disabled', html)
    assert re.search(r'value="raw"[^>]*checked', html)


def test_a_nested_field_falls_back_to_json_for_that_field_only() -> None:
    kinds = {spec.name: spec.kind for spec in describe_inputs(_NestedSettings)}
    assert kinds == {"inner": "json", "label": "text"}
    widget = SchemaSettingsWidget(lambda: {"n": ("Nested", _NestedSettings)}, "key", "extension")
    widget.current_key = "n"
    html = widget.render("settings", {"inner": {"size": 3}})
    assert re.search(r'<textarea name="settings__n__inner"[^>]*>\s*\{&quot;size&quot;: 3\}', html)
    assert re.search(r'value="form"[^>]*checked', html)
