"""Admin for BMC endpoints. The password is write-only: never rendered, blank keeps it."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from .models import BmcEndpoint


class BmcEndpointForm(forms.ModelForm[BmcEndpoint]):
    """The model form with a password field that is never filled in from the stored value."""

    password = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Stored encrypted. Leave blank to keep the current password.",
    )

    class Meta:
        model = BmcEndpoint
        fields = ["node", "driver", "address", "system_id", "username", "password", "verify_tls"]

    def clean_password(self) -> str:
        password: str = self.cleaned_data.get("password") or ""
        if not password and self.instance.pk:
            return self.instance.password  # blank = keep
        return password


@admin.register(BmcEndpoint)
class BmcEndpointAdmin(admin.ModelAdmin[BmcEndpoint]):
    """Endpoints by node; contact times and errors are written by bmc.client, not edited here."""

    form = BmcEndpointForm
    list_display = ["node", "driver", "address", "username", "last_contact_at", "short_error"]
    list_filter = ["driver", "verify_tls"]
    list_select_related = ["node"]
    raw_id_fields = ["node"]
    search_fields = ["node__hostname", "address"]
    readonly_fields = ["last_contact_at", "last_error", "created", "last_updated"]

    @admin.display(description="last error")
    def short_error(self, obj: BmcEndpoint) -> str:
        return obj.last_error[:80]
