"""Admin for Day 0: boot configs (network fields editable, secrets never shown) and join tokens
(read-only; the one change is "revoke", which needs a reason and is recorded)."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from nodes.models import OPERATE
from nodes.services import Actor, ReasonRequired, TransitionForbidden
from nodewarden.records import ReadOnlyAdmin

from . import cloudinit, services
from .models import BootConfig, JoinToken


@admin.register(BootConfig)
class BootConfigAdmin(admin.ModelAdmin):
    """Boot configs are created by provisioning (services.prepare_boot); here only edited."""

    list_display = ["node", "generation", "boot_image", "interface_mac", "ip_address", "vlan_id",
                    "user_data_fetched_at", "last_updated"]
    list_select_related = ["node"]
    search_fields = ["node__hostname", "interface_mac", "boot_image"]
    raw_id_fields = ["node"]
    readonly_fields = ["node", "generation", "kernel_cmdline", "user_data_fetched_at", "created", "last_updated"]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    @admin.display(description="Kernel command line")
    def kernel_cmdline(self, obj: BootConfig) -> str:
        return cloudinit.kernel_cmdline(obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class RevokeForm(forms.Form):
    reason = forms.CharField(max_length=300, widget=forms.Textarea(attrs={"rows": 2}),
                             help_text="Recorded in each node's history.")


@admin.register(JoinToken)
class JoinTokenAdmin(ReadOnlyAdmin):
    """Only the prefix is shown; the hash, the salt and the kubeadm secret hash never are."""

    list_display = ["prefix", "node", "generation", "status", "created", "expires_at", "used_at", "revoked_at",
                    "created_by"]
    list_filter = ["used_at", "revoked_at"]
    list_select_related = ["node", "created_by"]
    search_fields = ["node__hostname", "prefix"]
    raw_id_fields = ["node"]
    exclude = ["key_hash", "salt", "kubeadm_secret_hash"]
    actions = ["revoke_action"]

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(OPERATE)

    @admin.action(description="Revoke (reason required, audited)", permissions=["revoke"])
    def revoke_action(self, request: HttpRequest, queryset: QuerySet[JoinToken]) -> HttpResponse | None:
        form = RevokeForm(request.POST if "apply" in request.POST else None)
        if not form.is_valid():
            return TemplateResponse(request, "provisioning/admin_revoke_join_tokens.html", {
                **self.admin_site.each_context(request), "title": "Revoke join tokens", "form": form,
                "tokens": queryset.select_related("node"), "opts": self.model._meta,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            })
        revoked = 0
        for pk in queryset.values_list("pk", flat=True):
            try:
                revoked += services.revoke_join_token(pk, actor=Actor(user=request.user),
                                                      reason=form.cleaned_data["reason"])
            except (ReasonRequired, TransitionForbidden) as exc:
                self.message_user(request, f"Join token {pk}: {exc}", messages.ERROR)
        skipped = queryset.count() - revoked
        note = f" ({skipped} already used or revoked, left alone)" if skipped else ""
        self.message_user(request, f"Revoked {revoked} join token(s){note}.")
        return None
