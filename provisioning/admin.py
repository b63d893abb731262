"""Admin for Day 0: "Enroll node" (a form over ``enrollment.enroll``, on the boot configs' page),
boot configs (network fields editable, secrets never shown) and join tokens (read-only; the one
change is "revoke", which needs a reason and is recorded)."""

from __future__ import annotations

from dataclasses import fields

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from bmc.choices import BmcDriverKind
from fleet.models import Cluster, HardwareProfile, Persona, Site, Tenant
from nodes.models import OPERATE
from nodes.services import Actor
from nodewarden.admin_actions import reason_or_page
from nodewarden.errors import ReasonRequired, TransitionForbidden
from nodewarden.records import ReadOnlyAdmin

from . import cloudinit, services
from .enrollment import EnrollmentError, EnrollmentRequest, enroll
from .models import BootConfig, JoinToken


class EnrollNodeForm(forms.Form):
    """EnrollmentRequest's fields, whether to start Day 0, and the reason kept in the node's history.

    The service checks everything again (and the BMC): this form only offers the choices.
    """

    hostname = forms.CharField(max_length=253)
    serial = forms.CharField(max_length=100)
    bmc_driver = forms.ChoiceField(label="BMC driver", choices=BmcDriverKind.choices, initial=BmcDriverKind.REDFISH)
    bmc_address = forms.CharField(
        label="BMC address",
        max_length=255,
        help_text="Redfish: base URL such as https://10.0.0.5. IPMI: host or host:port.",
    )
    bmc_system_id = forms.CharField(
        label="BMC system id",
        max_length=255,
        required=False,
        help_text="Redfish system Id, UUID or path; blank for the BMC's only system.",
    )
    bmc_username = forms.CharField(label="BMC username", max_length=64)
    # Never rendered back, not even after a refused enrollment: the browser's copy is the only one.
    bmc_password = forms.CharField(
        label="BMC password",
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Stored encrypted; never shown again.",
    )
    bmc_verify_tls = forms.BooleanField(label="Verify the BMC's TLS certificate", required=False, initial=True)
    hardware_profile = forms.ModelChoiceField(HardwareProfile.objects.all(), to_field_name="name")
    site = forms.ModelChoiceField(Site.objects.all(), to_field_name="slug")
    cluster = forms.ModelChoiceField(Cluster.objects.all(), to_field_name="name", required=False)
    rack = forms.CharField(max_length=100, required=False, help_text="Rack name within the site.")
    tenant = forms.ModelChoiceField(Tenant.objects.all(), to_field_name="slug", required=False)
    persona = forms.ModelChoiceField(Persona.objects.all(), to_field_name="name", required=False)
    start = forms.BooleanField(
        label="Start Day 0 now",
        required=False,
        initial=True,
        help_text="Prepare the boot config and join token, then PXE-boot the node.",
    )
    reason = forms.CharField(
        max_length=1000, widget=forms.Textarea(attrs={"rows": 2}), help_text="Recorded in the node's history."
    )

    def enrollment_request(self) -> EnrollmentRequest:
        """The cleaned form as the service's request: chosen objects by the name the service looks up."""
        values = {}
        for f in fields(EnrollmentRequest):
            value, field = self.cleaned_data[f.name], self.fields[f.name]
            if isinstance(field, forms.ModelChoiceField):
                # Each choice field here names its to_field_name; None would mean the pk, as in Django.
                value = getattr(value, field.to_field_name or "pk") if value is not None else ""
            values[f.name] = value
        return EnrollmentRequest(**values)


@admin.register(BootConfig)
class BootConfigAdmin(admin.ModelAdmin[BootConfig]):
    """Boot configs are created by provisioning (services.prepare_boot); here only edited.

    Their list offers "Enroll node" (``enroll/``), where Day 0 begins and the boot config comes from.
    """

    list_display = [
        "node",
        "generation",
        "boot_image",
        "interface_mac",
        "ip_address",
        "vlan_id",
        "user_data_fetched_at",
        "last_updated",
    ]
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

    def get_urls(self) -> list[URLPattern]:
        enroll_url = path("enroll/", self.admin_site.admin_view(self.enroll_view), name="provisioning_enroll_node")
        return [enroll_url, *super().get_urls()]

    def enroll_view(self, request: HttpRequest) -> HttpResponse:
        """Enroll one node through ``enrollment.enroll`` as the signed-in user; its refusals become form errors."""
        if not request.user.has_perm(OPERATE):
            raise PermissionDenied("You may not enroll nodes.")
        form = EnrollNodeForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            start = form.cleaned_data["start"]
            try:
                node = enroll(
                    form.enrollment_request(),
                    actor=Actor(user=request.user),
                    reason=form.cleaned_data["reason"],
                    start=start,
                )
            except EnrollmentError as exc:
                for name, errors in exc.errors.items():
                    form.add_error(name if name in form.fields else None, errors)
            else:
                then = " Day 0 started: it boots from the network." if start else ""
                self.message_user(request, f"Enrolled {node.hostname}.{then}", messages.SUCCESS)
                return redirect("admin:nodes_node_change", node.pk)
        return TemplateResponse(
            request,
            "admin/provisioning/enroll_node.html",
            {
                **self.admin_site.each_context(request),
                "title": "Enroll node",
                "form": form,
                "opts": self.model._meta,
            },
        )


@admin.register(JoinToken)
class JoinTokenAdmin(ReadOnlyAdmin):
    """Only the prefix is shown; the hash, the salt and the kubeadm secret hash never are."""

    list_display = [
        "prefix",
        "node",
        "generation",
        "status",
        "created",
        "expires_at",
        "used_at",
        "revoked_at",
        "created_by",
    ]
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
        reason, page = reason_or_page(
            self,
            request,
            queryset,
            title="Revoke join tokens",
            button="Revoke",
            intro="A revoked join token can no longer be used to join. Your name and your reason are "
            "recorded in each node's history.",
        )
        if reason is None:
            return page  # the page asking for a reason
        revoked = 0
        for pk in queryset.values_list("pk", flat=True):
            try:
                revoked += services.revoke_join_token(pk, actor=Actor(user=request.user), reason=reason)
            except (ReasonRequired, TransitionForbidden) as exc:
                self.message_user(request, f"Join token {pk}: {exc}", messages.ERROR)
        skipped = queryset.count() - revoked
        note = f" ({skipped} already used or revoked, left alone)" if skipped else ""
        self.message_user(request, f"Revoked {revoked} join token(s){note}.")
        return None
