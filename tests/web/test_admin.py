"""The admin shapes profiles: validated extension settings, buildable sets, the test action."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from agents.models import AgentProfile, ChatSession, ExtensionSetting, Message, Run
from agents.profiles.catalog import build_agent_for_profile, extension_catalog

ADD_URL = "/admin/agents/agentprofile/add/"


def _profile_post(extensions: list[dict[str, Any]], **profile: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "Support bot",
        "slug": "support-bot",
        "description": "",
        "provider": "demo",
        "model_name": "demo",
        "provider_settings": '{"delay": 0}',
        "system_prompt": "Be brief.",
        "max_iterations": "10",
        "double_texting": "steer",
        "is_active": "on",
        "extensions-TOTAL_FORMS": str(len(extensions)),
        "extensions-INITIAL_FORMS": "0",
        "extensions-MIN_NUM_FORMS": "0",
        "extensions-MAX_NUM_FORMS": "1000",
    }
    data.update(profile)
    for index, row in enumerate(extensions):
        data[f"extensions-{index}-key"] = row["key"]
        data[f"extensions-{index}-instance_name"] = row.get("instance_name", "")
        if row.get("enabled", True):
            data[f"extensions-{index}-enabled"] = "on"
        data[f"extensions-{index}-priority"] = str(row.get("priority", 100))
        data[f"extensions-{index}-position"] = str(index)
        data[f"extensions-{index}-settings"] = row.get("settings", "{}")
    return data


def _errors(response: Any) -> str:
    return response.content.decode()


@pytest.mark.django_db
def test_valid_profile_with_extensions_is_saved(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        _profile_post(
            [
                {"key": "demo_tools", "settings": '{"tools": ["calculator"]}'},
                {"key": "tool_approval", "settings": '{"tools": ["calc*"], "timeout_seconds": 30}'},
            ]
        ),
    )
    assert response.status_code == 302, _errors(response)
    profile = AgentProfile.objects.get(slug="support-bot")
    keys = list(profile.extensions.values_list("key", "settings"))
    assert keys == [
        ("demo_tools", {"tools": ["calculator"]}),
        ("tool_approval", {"tools": ["calc*"], "timeout_seconds": 30}),
    ]


@pytest.mark.django_db
def test_bad_extension_setting_gets_a_field_level_error_and_nothing_is_saved(
    admin_client: Client,
) -> None:
    response = admin_client.post(
        ADD_URL,
        _profile_post([{"key": "tool_approval", "settings": '{"timeout_seconds": -5}'}]),
    )
    assert response.status_code == 200
    body = _errors(response)
    assert "timeout_seconds: Input should be greater than 0" in body
    assert not AgentProfile.objects.filter(slug="support-bot").exists()


@pytest.mark.django_db
def test_misspelt_extension_setting_is_refused(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL, _profile_post([{"key": "ask_user", "settings": '{"timeout_secs": 5}'}])
    )
    assert response.status_code == 200
    assert "timeout_secs: Extra inputs are not permitted" in _errors(response)
    assert not AgentProfile.objects.exists()


@pytest.mark.django_db
def test_duplicate_extension_names_cannot_be_saved(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL, _profile_post([{"key": "steering"}, {"key": "steering", "priority": 5}])
    )
    assert response.status_code == 200
    body = _errors(response)
    assert "cannot run together" in body
    assert "two extensions are named" in body
    assert not AgentProfile.objects.exists()


@pytest.mark.django_db
def test_instance_names_let_one_extension_run_twice(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        _profile_post(
            [
                {
                    "key": "tool_approval",
                    "instance_name": "approve-clock",
                    "settings": '{"tools": ["clock"]}',
                },
                {
                    "key": "tool_approval",
                    "instance_name": "approve-calc",
                    "settings": '{"tools": ["calculator"]}',
                },
            ]
        ),
    )
    assert response.status_code == 302, _errors(response)


@pytest.mark.django_db
def test_session_store_cannot_be_disabled(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL, _profile_post([{"key": "session_store", "enabled": False}])
    )
    assert response.status_code == 200
    assert "is required and cannot be disabled" in _errors(response)


@pytest.mark.django_db
def test_bad_provider_settings_are_refused_per_field(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        _profile_post(
            [],
            provider="openai",
            model_name="gpt-test",
            provider_settings='{"api_key_env": "sk-not a variable", "timeout": 0}',
        ),
    )
    assert response.status_code == 200
    body = _errors(response)
    assert "api_key_env: String should match pattern" in body
    assert "timeout: Input should be greater than 0" in body
    assert not AgentProfile.objects.exists()


@pytest.mark.django_db
def test_an_api_key_cannot_be_stored_in_provider_settings(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        _profile_post(
            [],
            provider="openai",
            model_name="gpt-test",
            provider_settings='{"api_key": "sk-secret-value"}',
        ),
    )
    assert response.status_code == 200
    assert "api_key: Extra inputs are not permitted" in _errors(response)
    assert not AgentProfile.objects.exists()


@pytest.mark.django_db
def test_real_provider_needs_a_model_name(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL, _profile_post([], provider="anthropic", model_name="", provider_settings="{}")
    )
    assert response.status_code == 200
    assert "needs a model name" in _errors(response)


@pytest.mark.django_db
def test_change_page_previews_the_hook_order(admin_client: Client) -> None:
    profile = AgentProfile.objects.create(name="P", slug="p", provider="demo")
    ExtensionSetting.objects.create(profile=profile, key="demo_tools", priority=50, position=0)
    ExtensionSetting.objects.create(profile=profile, key="ask_user", priority=20, position=1)
    response = admin_client.get(f"/admin/agents/agentprofile/{profile.pk}/change/")
    body = response.content.decode()
    assert response.status_code == 200
    # on_tool runs ask_user (priority 20) before DemoToolsExtension (50); the store has no on_tool.
    assert "<code>on_tool</code></td><td>AskUserExtension → DemoToolsExtension" in body
    assert "<code>on_state</code></td><td>DjangoSessionStore" in body


@pytest.mark.django_db
def test_change_page_of_an_unbuildable_profile_says_why(admin_client: Client) -> None:
    profile = AgentProfile.objects.create(name="P", slug="p", provider="demo")
    ExtensionSetting.objects.create(
        profile=profile, key="ask_user", settings={"timeout_seconds": "soon"}
    )
    response = admin_client.get(f"/admin/agents/agentprofile/{profile.pk}/change/")
    assert response.status_code == 200
    assert "Cannot be built: ask_user: timeout_seconds" in response.content.decode()


@pytest.mark.django_db
def test_catalog_shows_descriptions_and_defaults(admin_client: Client) -> None:
    response = admin_client.get(ADD_URL)
    body = response.content.decode()
    assert response.status_code == 200
    for spec in extension_catalog().values():
        assert spec.label in body


def _test_url(profile: AgentProfile) -> str:
    return f"/admin/agents/agentprofile/{profile.pk}/test/"


@pytest.mark.django_db(transaction=True)
def test_the_test_button_reports_the_answer_and_stores_nothing(admin_client: Client) -> None:
    profile = AgentProfile.objects.create(
        name="Echo", slug="echo", provider="demo", provider_settings={"delay": 0}
    )
    page = admin_client.get(f"/admin/agents/agentprofile/{profile.pk}/change/").content.decode()
    assert f'data-url="{_test_url(profile)}"' in page
    response = admin_client.post(_test_url(profile))
    data = response.json()
    assert response.status_code == 200 and data["ok"] is True
    assert "offline demo model" in data["answer"]
    assert data["profile"] == "Echo"
    # The dry run stores nothing: a session store left in would have written these rows.
    assert (Message.objects.count(), Run.objects.count(), ChatSession.objects.count()) == (0, 0, 0)


@pytest.mark.django_db(transaction=True)
def test_the_test_button_reports_a_provider_failure(admin_client: Client) -> None:
    profile = AgentProfile.objects.create(
        name="Broken",
        slug="broken",
        provider="openai",
        model_name="gpt-test",
        provider_settings={
            "base_url": "http://127.0.0.1:9/v1",
            "timeout": 2,
            "max_retries": 0,
            "api_key_env": "ZETT_TEST_NO_SUCH_KEY",
        },
    )
    data = admin_client.post(_test_url(profile)).json()
    assert data["ok"] is False and data["error"].startswith("failed:")


@pytest.mark.django_db
def test_the_test_button_needs_staff_a_post_and_a_real_profile(
    admin_client: Client, client: Client, user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(name="Echo", slug="echo", provider="demo")
    assert admin_client.get(_test_url(profile)).status_code == 405
    assert admin_client.post("/admin/agents/agentprofile/999999/test/").status_code == 404
    assert client.post(_test_url(profile)).status_code == 403  # anonymous
    client.login(username=user.username, password=password)
    assert client.post(_test_url(profile)).status_code == 403  # signed in, not staff


@pytest.mark.django_db
def test_run_records_are_read_only_in_the_admin(admin_client: Client) -> None:
    assert admin_client.get("/admin/agents/run/add/").status_code == 403
    assert admin_client.get("/admin/agents/operatoraction/add/").status_code == 403


@pytest.mark.django_db
def test_non_staff_cannot_reach_the_admin(client: Client, user: Any, password: str) -> None:
    client.login(username=user.username, password=password)
    response = client.get(ADD_URL)
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


@pytest.mark.django_db
def test_a_profile_changed_after_build_keeps_the_built_agent_unchanged() -> None:
    profile = AgentProfile.objects.create(name="P", slug="p", provider="demo")
    ExtensionSetting.objects.create(profile=profile, key="demo_tools")
    agent = build_agent_for_profile(profile, profile.extensions.all())
    ExtensionSetting.objects.create(profile=profile, key="steering")
    assert [ext.name for ext in agent.extensions] == ["DjangoSessionStore", "DemoToolsExtension"]
