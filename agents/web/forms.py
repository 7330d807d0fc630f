"""The new-chat form (the one HTML form of the chat pages)."""

from __future__ import annotations

from django import forms

from ..models import AgentProfile


class NewChatForm(forms.Form):
    profile = forms.ModelChoiceField(
        queryset=AgentProfile.objects.filter(is_active=True), empty_label=None
    )
    title = forms.CharField(max_length=200, required=False)
