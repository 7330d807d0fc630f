"""Django admin: agent profiles with validated extension settings, and read-only run records."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, path
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from .admin_schema import Entries, SchemaSettingsField
from .extensions.tracer_provider import request_id_of_trace
from .models import (
    AgentProfile,
    BudgetCharge,
    ChatSession,
    ExtensionSetting,
    Message,
    ModelPrice,
    OperatorAction,
    Run,
    RunEvent,
    UserBudget,
)
from .profiles.catalog import (
    ExtensionRow,
    ProfileConfigError,
    build_extensions,
    extension_catalog,
    hook_order,
)
from .profiles.check import PROFILE_TEST_PROMPT, test_profile
from .providers.registry import PROVIDERS


def _provider_entries() -> Entries:
    return {key: (spec.label, spec.settings_model) for key, spec in PROVIDERS.items()}


def _extension_entries() -> Entries:
    return {key: (spec.label, spec.settings_model) for key, spec in extension_catalog().items()}


class AgentProfileForm(forms.ModelForm):
    provider = forms.ChoiceField(choices=())
    provider_settings = SchemaSettingsField(
        entries=_provider_entries,
        selector_field="provider",
        noun="provider",
        help_text="Validated by the provider's settings model. API keys are never stored here: "
        "name the environment variable that holds the key (api_key_env).",
    )

    class Meta:
        model = AgentProfile
        fields = "__all__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["provider"].choices = [(s.key, s.label) for s in PROVIDERS.values()]
        current = self.initial.get("provider") or self.instance.provider or None
        self.fields["provider_settings"].bind_selector(self.add_prefix("provider"), current)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        provider = cleaned.get("provider")
        raw = cleaned.get("provider_settings")
        if provider is None:
            return cleaned
        spec = PROVIDERS.get(provider)
        if spec is None:
            self.add_error("provider", f"Unknown provider {provider!r}.")
            return cleaned
        if "provider_settings" not in cleaned:  # its field reported what is wrong
            return cleaned
        from .profiles.catalog import build_model

        try:
            build_model(provider, cleaned.get("model_name") or "", raw)
        except ProfileConfigError as exc:
            self.add_error("model_name", str(exc))
        return cleaned


class ExtensionSettingForm(forms.ModelForm):
    key = forms.ChoiceField(choices=())
    settings = SchemaSettingsField(
        entries=_extension_entries, selector_field="key", noun="extension"
    )

    class Meta:
        model = ExtensionSetting
        fields = ("key", "instance_name", "enabled", "priority", "settings", "position")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        catalog = extension_catalog()
        self.fields["key"].choices = [
            (key, f"{spec.label} ({key})") for key, spec in catalog.items()
        ]
        current = self.initial.get("key") or (self.instance.key if self.instance.pk else None)
        self.fields["settings"].bind_selector(self.add_prefix("key"), current)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        key = cleaned.get("key")
        spec = extension_catalog().get(key or "")
        if spec is None:
            return cleaned
        if spec.required and not cleaned.get("enabled", True):
            self.add_error("enabled", f"{spec.label} is required and cannot be disabled.")
        return cleaned


class ExtensionSettingFormSet(forms.BaseInlineFormSet):
    """Refuses a set of extensions that cannot be built together (e.g. duplicate names)."""

    def clean(self) -> None:
        super().clean()
        if any(form.errors for form in self.forms):
            return
        rows = []
        for form in self.forms:
            data = getattr(form, "cleaned_data", None)
            if not data or data.get("DELETE"):
                continue
            rows.append(
                ExtensionRow(
                    data["key"],
                    data.get("instance_name") or "",
                    data.get("enabled", True),
                    data.get("priority", 100),
                    data.get("settings") or {},
                )
            )
        try:
            build_extensions(rows)
        except ProfileConfigError as exc:
            raise ValidationError(f"These extensions cannot run together: {exc}") from None


class ExtensionSettingInline(admin.StackedInline):
    model = ExtensionSetting
    form = ExtensionSettingForm
    formset = ExtensionSettingFormSet
    extra = 0
    readonly_fields = ("catalog_entry",)
    fields = (
        "key",
        "catalog_entry",
        "instance_name",
        "enabled",
        "priority",
        "position",
        "settings",
    )

    @admin.display(description="About")
    def catalog_entry(self, obj: ExtensionSetting) -> str:
        spec = extension_catalog().get(obj.key) if obj and obj.key else None
        if spec is None:
            entries = format_html_join(
                "",
                "<li><b>{}</b> ({}): {}</li>",
                ((s.label, s.key, s.description) for s in extension_catalog().values()),
            )
            return format_html("<ul>{}</ul>", entries)
        return spec.description


@admin.register(AgentProfile)
class AgentProfileAdmin(admin.ModelAdmin):
    form = AgentProfileForm
    inlines = [ExtensionSettingInline]
    list_display = ("name", "slug", "provider", "model_name", "double_texting", "is_active")
    list_filter = ("provider", "is_active", "double_texting")
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    readonly_fields = ("effective_order",)

    @admin.display(description="Effective order of extensions per hook")
    def effective_order(self, obj: AgentProfile | None) -> str:
        if obj is None or obj.pk is None:
            return "Save the profile to see the order in which its extensions run."
        try:
            extensions = build_extensions(obj.extensions.all())
        except ProfileConfigError as exc:
            return format_html('<span class="errornote">Cannot be built: {}</span>', exc)
        order = hook_order(extensions)
        rows = format_html_join(
            "",
            "<tr><td><code>{}</code></td><td>{}</td></tr>",
            ((hook, " → ".join(names) or "—") for hook, names in order.items()),
        )
        return format_html("<table><tr><th>Hook</th><th>Runs, in order</th></tr>{}</table>", rows)

    def get_urls(self) -> list[URLPattern]:
        test = path(
            "<path:object_id>/test/",
            profile_test_view,
            name="agents_agentprofile_test",
        )
        return [test, *super().get_urls()]


def _load_for_test(user: Any, object_id: str) -> tuple[AgentProfile | None, list[Any], int]:
    """(profile, its extension rows, HTTP status) for the test view's caller."""
    if not (user.is_active and user.is_staff):
        return None, [], 403
    if not user.has_perm("agents.change_agentprofile"):
        return None, [], 403
    profile = AgentProfile.objects.filter(pk=object_id).first() if object_id.isdigit() else None
    if profile is None:
        return None, [], 404
    return profile, list(profile.extensions.all()), 200


@require_POST
async def profile_test_view(request: HttpRequest, object_id: str) -> JsonResponse:
    """ "Test this profile": one short prompt through the saved profile, answered as JSON.

    An async view: the model call waits on the event loop, so neither the admin page (which
    fetches this) nor any other request waits for it; the database is touched once, briefly,
    before the call. POSTs pass the site's CSRF check like any form.
    """
    user = await request.auser()
    profile, rows, status = await sync_to_async(_load_for_test)(user, object_id)
    if profile is None:
        reason = (
            "Staff with the right to change profiles only." if status == 403 else "No such profile."
        )
        return JsonResponse({"ok": False, "error": reason}, status=status)
    result = await test_profile(profile, rows)
    return JsonResponse(
        {
            "ok": result.ok,
            "profile": profile.name,
            "prompt": PROFILE_TEST_PROMPT,
            "answer": result.answer,
            "error": result.error,
            "seconds": round(result.seconds, 2),
        }
    )


class MessageInline(admin.TabularInline):
    model = Message
    extra = 0
    can_delete = False
    fields = ("seq", "role", "content", "tool_name", "is_error", "created_at")
    readonly_fields = fields
    show_change_link = False


class _ReadOnly(admin.ModelAdmin):
    """Records of what happened: visible to staff, never edited by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ChatSession)
class ChatSessionAdmin(_ReadOnly):
    list_display = ("__str__", "owner", "profile", "status", "updated_at")
    list_filter = ("status", "profile")
    search_fields = ("title", "id", "owner__username")
    inlines = [MessageInline]


@admin.register(Run)
class RunAdmin(_ReadOnly):
    list_display = (
        "request_id",
        "session",
        "kind",
        "status",
        "phase",
        "iterations",
        "input_tokens",
        "output_tokens",
        "cost",
        "created_at",
        "host",
    )
    list_filter = ("status", "kind")
    search_fields = ("request_id", "session__id")
    search_help_text = "Request id, session id, or a trace id (as the run page shows it)."

    def get_search_results(self, request: HttpRequest, queryset: Any, search_term: str) -> Any:
        """Also find a run by its trace id: the request id's 32 hex digits (or a traceparent)."""
        request_id = request_id_of_trace(search_term)
        if request_id is not None:
            return queryset.filter(request_id=request_id), False
        return super().get_search_results(request, queryset, search_term)


@admin.register(RunEvent)
class RunEventAdmin(_ReadOnly):
    list_display = ("run", "seq", "last_seq", "type", "phase", "at")
    list_filter = ("type",)


@admin.register(OperatorAction)
class OperatorActionAdmin(_ReadOnly):
    list_display = ("created_at", "user", "action", "outcome", "session", "run")
    list_filter = ("action", "outcome")


def models_without_price() -> list[tuple[str, str]]:
    """(provider, model name) of every model that ran and has no price set."""
    seen = (
        Run.objects.filter(cost__isnull=True, profile__isnull=False)
        .exclude(input_tokens=0, output_tokens=0)
        .values_list("profile__provider", "profile__model_name")
        .distinct()
    )
    return sorted(set(seen))


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    """Prices per million tokens; the list names the models that ran without a price."""

    list_display = (
        "provider",
        "model_pattern",
        "input_per_million",
        "output_per_million",
        "cache_read_per_million",
        "cache_write_per_million",
        "currency",
        "valid_from",
    )
    list_filter = ("provider", "currency")
    search_fields = ("model_pattern",)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        unpriced = models_without_price()
        if unpriced:
            names = format_html_join(", ", "{}:{}", unpriced)
            messages.warning(request, format_html("Models seen without a price: {}", names))
        return super().changelist_view(request, extra_context)


@admin.register(UserBudget)
class UserBudgetAdmin(admin.ModelAdmin):
    """Per-user cost caps; an empty cap falls back to ZETT_USER_DAILY/MONTHLY_COST_CAP."""

    list_display = ("user", "daily_cost_cap", "monthly_cost_cap")
    search_fields = ("user__username",)
    autocomplete_fields = ("user",)


@admin.register(BudgetCharge)
class BudgetChargeAdmin(_ReadOnly):
    """What each model call reserved against the caps, and what it cost once settled."""

    list_display = ("created_at", "user", "profile", "run", "call_id", "amount", "settled")
    list_filter = ("settled", "profile")
    search_fields = ("user__username", "run__request_id")
