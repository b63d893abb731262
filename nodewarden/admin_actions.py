"""Admin actions that ask for a reason first (every override is audited): one page, one form."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=300, widget=forms.Textarea(attrs={"rows": 2}))


def reason_or_page(
    modeladmin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    title: str,
    button: str,
    intro: str = "",
) -> tuple[str | None, TemplateResponse | None]:
    """(the reason, None) once the operator gave one; else (None, the page asking for it)."""
    form = ReasonForm(request.POST if "apply" in request.POST else None)
    if form.is_valid():
        return form.cleaned_data["reason"], None
    return None, TemplateResponse(
        request,
        "admin/reason_action.html",
        {
            **modeladmin.admin_site.each_context(request),
            "title": title,
            "button": button,
            "intro": intro,
            "form": form,
            "objects": queryset,
            "action": request.POST.get("action", ""),
            "opts": modeladmin.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        },
    )
