"""Admin for nodes: inventory edits are free, the state is not.

The state field is read-only; the only override is the "Force state" action,
which needs the ``nodes.force_node_state`` permission and a reason, and goes
through ``nodes.services.force_state`` like every other change of state.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from nodewarden.records import ReadOnlyAdmin

from . import followups, services
from .choices import NodeState
from .models import GPU, Node, NodeEvent, StateCountSnapshot

HISTORY_INLINE_ROWS = 50


class ForceStateForm(forms.Form):
    target = forms.ChoiceField(choices=NodeState.choices, label="New state")
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), max_length=1000, help_text="Recorded in each node's history."
    )


class GPUInline(admin.TabularInline[GPU, Node]):
    model = GPU
    extra = 0


class HistoryInline(admin.TabularInline[NodeEvent, Node]):
    """The newest history rows, read-only (the full history is on the node page)."""

    model = NodeEvent
    fields = ("created", "kind", "transition", "source_state", "target_state", "actor_name", "reason")
    readonly_fields = fields
    ordering = ["-created", "-id"]
    extra = 0
    max_num = 0
    can_delete = False
    verbose_name_plural = f"History (newest {HISTORY_INLINE_ROWS})"

    def get_queryset(self, request: HttpRequest) -> QuerySet[NodeEvent]:
        qs = super().get_queryset(request)
        # Inline formsets cannot take a sliced queryset: bound by ids instead.
        node_id = request.resolver_match.kwargs.get("object_id") if request.resolver_match else None
        if node_id:
            newest = list(
                qs.filter(node_id=node_id)
                .order_by("-created", "-id")
                .values_list("id", flat=True)[:HISTORY_INLINE_ROWS]
            )
            qs = qs.filter(id__in=newest)
        return qs

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin[Node]):
    list_display = ["hostname", "state", "state_changed_at", "site", "cluster", "tenant", "hardware_profile", "serial"]
    list_filter = ["state", "site", "cluster", "tenant", "hardware_profile", "persona", "is_revalidation"]
    list_select_related = ["site", "cluster", "tenant", "hardware_profile"]
    search_fields = ["hostname", "serial", "bmc_address", "gpus__uuid"]
    readonly_fields = ["state", "state_changed_at", "is_revalidation", "created", "last_updated"]
    raw_id_fields = ["rack"]
    inlines = [GPUInline, HistoryInline]
    actions = ["force_state_action"]

    def has_force_state_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("nodes.force_node_state")

    def save_model(self, request: HttpRequest, obj: Node, form: Any, change: bool) -> None:
        """An inventory edit (the admin's change view runs in one transaction); a node moved to
        another cluster or tenant takes the rows other apps derive from its placement along."""
        super().save_model(request, obj, form, change)
        if change and {"cluster", "tenant"} & set(form.changed_data):
            followups.cluster_changed(obj)

    def delete_model(self, request: HttpRequest, obj: Node) -> None:
        """A node deleted leaves its placement (its history goes with it): derived rows follow."""
        super().delete_model(request, obj)
        followups.cluster_changed(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        nodes = list(queryset)
        super().delete_queryset(request, queryset)
        for node in nodes:
            followups.cluster_changed(node)

    @admin.action(description="Force state (audited, reason required)", permissions=["force_state"])
    def force_state_action(self, request: HttpRequest, queryset: QuerySet[Node]) -> HttpResponse | None:
        form = ForceStateForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            actor = services.Actor(user=request.user)
            done = 0
            for node_id in queryset.values_list("pk", flat=True):
                services.force_state(
                    node_id, form.cleaned_data["target"], actor=actor, reason=form.cleaned_data["reason"]
                )
                done += 1
            label = NodeState(form.cleaned_data["target"]).label
            self.message_user(request, f"Forced {done} node(s) to {label}.", messages.WARNING)
            return None
        return TemplateResponse(
            request,
            "admin/nodes/node/force_state.html",
            {
                **self.admin_site.each_context(request),
                "title": "Force state",
                "form": form,
                "nodes": queryset.select_related(None).only("hostname", "state"),
                "opts": self.model._meta,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            },
        )


@admin.register(NodeEvent)
class NodeEventAdmin(ReadOnlyAdmin):
    """History is append-only: browse and search, never add, change or delete."""

    list_display = ["created", "hostname", "kind", "transition", "source_state", "target_state", "actor_name"]
    list_filter = ["kind", "target_state", "actor_kind"]
    search_fields = ["hostname", "reason", "actor_name", "correlation_id"]
    date_hierarchy = "created"
    show_full_result_count = False


@admin.register(StateCountSnapshot)
class StateCountSnapshotAdmin(admin.ModelAdmin[StateCountSnapshot]):
    list_display = ["taken_at", "state", "cluster", "tenant", "count"]
    list_filter = ["state", "cluster", "tenant"]
    list_select_related = ["cluster", "tenant"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
