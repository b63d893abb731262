"""Admin: rules and the XID catalog are editable, always with a reason and audited
(``HealthRuleChange``); findings, alerts and unrouted alerts are read-only, alerts get
audited resolve/unsilence actions that go through ``health.alerts``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.forms.models import model_to_dict
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from nodes.services import Actor
from nodewarden.errors import ReasonRequired
from nodewarden.records import ReadOnlyAdmin

from . import alerts as verbs
from .models import Alert, Finding, HealthRule, HealthRuleChange, UnroutedAlert, XidDefinition


class ReasonForm(forms.ModelForm[Any]):
    """Every edit of a rule or an XID definition needs a reason; it goes in the change log."""

    change_reason = forms.CharField(max_length=300, help_text="Why this change? Kept in the change log.")


def _changes(obj: Any, form: forms.ModelForm[Any]) -> dict[str, list[Any]]:
    before = form.initial
    after = model_to_dict(obj, fields=form.changed_data)
    return {name: [before.get(name), after.get(name)] for name in form.changed_data if name != "change_reason"}


def _staff(request: HttpRequest) -> User:
    """Who edits: the admin site lets signed-in staff in only."""
    if isinstance(request.user, AnonymousUser):
        raise PermissionDenied
    return request.user


class ChangeLogInline(admin.TabularInline[HealthRuleChange, Any]):
    model = HealthRuleChange
    extra = 0
    can_delete = False
    fields = readonly_fields = ("created", "actor_name", "reason", "changes")
    ordering = ["-created"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class AuditedAdmin(admin.ModelAdmin[Any]):
    form = ReasonForm
    inlines = [ChangeLogInline]

    def _log(self, request: HttpRequest, obj: Any, form: forms.ModelForm[Any], **target: Any) -> None:
        HealthRuleChange.objects.create(
            actor=_staff(request),
            actor_name=request.user.get_username(),
            reason=form.cleaned_data["change_reason"],
            changes=_changes(obj, form),
            **target,
        )


@admin.register(HealthRule)
class HealthRuleAdmin(AuditedAdmin):
    list_display = [
        "key",
        "hardware_profile",
        "enabled",
        "shadow",
        "severity",
        "recommended_action",
        "threshold",
        "clear_threshold",
        "window_seconds",
        "count",
        "clear_after_seconds",
        "updated",
        "updated_by",
    ]
    list_filter = ["enabled", "shadow", "severity", "hardware_profile"]
    list_select_related = ["hardware_profile", "updated_by"]
    search_fields = ["key", "description"]
    readonly_fields = ["updated", "updated_by"]

    def save_model(self, request: HttpRequest, obj: HealthRule, form: forms.ModelForm[Any], change: bool) -> None:
        obj.updated, obj.updated_by = timezone.now(), _staff(request)
        super().save_model(request, obj, form, change)
        self._log(request, obj, form, rule=obj, target=str(obj)[:150])


@admin.register(XidDefinition)
class XidDefinitionAdmin(AuditedAdmin):
    list_display = [
        "xid",
        "name",
        "severity",
        "recommended_action",
        "gpu_reset",
        "nvidia_bucket",
        "edited_by",
        "edited_at",
    ]
    list_filter = ["severity", "recommended_action", "gpu_reset", "nvidia_bucket"]
    list_select_related = ["edited_by"]
    search_fields = ["xid", "name", "meaning"]
    readonly_fields = ["edited_by", "edited_reason", "edited_at"]

    def save_model(self, request: HttpRequest, obj: XidDefinition, form: forms.ModelForm[Any], change: bool) -> None:
        obj.edited_by, obj.edited_at = _staff(request), timezone.now()
        obj.edited_reason = form.cleaned_data["change_reason"]
        super().save_model(request, obj, form, change)
        self._log(request, obj, form, xid=obj, target=f"XID {obj.xid}")


@admin.register(Finding)
class FindingAdmin(ReadOnlyAdmin):
    list_display = [
        "created",
        "hostname",
        "gpu_index",
        "rule",
        "xid",
        "severity",
        "recommended_action",
        "summary",
        "source",
        "shadow",
    ]
    list_filter = ["severity", "rule", "source", "shadow"]
    search_fields = ["hostname", "summary", "rule", "subject"]
    date_hierarchy = "created"


@admin.register(HealthRuleChange)
class HealthRuleChangeAdmin(ReadOnlyAdmin):
    list_display = ["created", "target", "actor_name", "reason"]
    search_fields = ["target", "actor_name", "reason"]


@admin.register(UnroutedAlert)
class UnroutedAlertAdmin(ReadOnlyAdmin):
    list_display = ["received_at", "status", "alertname", "fingerprint", "reason"]
    list_filter = ["status"]
    search_fields = ["alertname", "fingerprint", "reason"]


class AlertReasonForm(forms.Form):
    reason = forms.CharField(max_length=300, widget=forms.Textarea(attrs={"rows": 2}))


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = [
        "node",
        "gpu_index",
        "rule",
        "subject",
        "severity",
        "state",
        "occurrences",
        "last_seen",
        "acknowledged_at",
        "silenced_until",
    ]
    list_filter = ["state", "severity", "rule"]
    list_select_related = ["node"]
    search_fields = ["node__hostname", "summary", "rule", "subject"]
    actions = ["resolve_action", "unsilence_action"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and request.user.has_perm("nodes.operate_node")  # the changelist, for actions

    def _with_reason(
        self, request: HttpRequest, queryset: QuerySet[Alert], verb: Any, name: str
    ) -> HttpResponse | None:
        form = AlertReasonForm(request.POST if "apply" in request.POST else None)
        if not form.is_valid():
            return TemplateResponse(
                request,
                "health/admin_alert_action.html",
                {
                    **self.admin_site.each_context(request),
                    "title": f"{name.capitalize()} alerts",
                    "form": form,
                    "alerts": queryset,
                    "action": f"{name}_action",
                    "opts": self.model._meta,
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                },
            )
        done = 0
        for pk in queryset.values_list("pk", flat=True):
            try:
                verb(pk, actor=Actor(user=request.user), reason=form.cleaned_data["reason"])
                done += 1
            except (ReasonRequired, ValueError, PermissionError) as exc:
                self.message_user(request, f"Alert {pk}: {exc}", messages.ERROR)
        self.message_user(request, f"{done} alert(s): {name}d.")
        return None

    @admin.action(description="Resolve (reason required, audited)")
    def resolve_action(self, request: HttpRequest, queryset: QuerySet[Alert]) -> HttpResponse | None:
        return self._with_reason(request, queryset, verbs.resolve, "resolve")

    @admin.action(description="Lift silence (reason required, audited)")
    def unsilence_action(self, request: HttpRequest, queryset: QuerySet[Alert]) -> HttpResponse | None:
        return self._with_reason(request, queryset, verbs.unsilence, "unsilence")
