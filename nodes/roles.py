"""Built-in operator roles, kept in step with the permissions after every migrate."""

from __future__ import annotations

from typing import Any

OPERATORS = "Operators"
FLEET_ADMINS = "Fleet admins"

ROLE_PERMISSIONS = {
    OPERATORS: ["nodes.operate_node", "nodes.view_node", "nodes.view_nodeevent"],
    FLEET_ADMINS: [
        "nodes.operate_node",
        "nodes.force_node_state",
        "nodes.view_node",
        "nodes.change_node",
        "nodes.view_nodeevent",
    ],
}


def ensure_roles(**kwargs: Any) -> None:
    """post_migrate hook: create the role groups and grant their permissions."""
    from django.contrib.auth.models import Group, Permission

    for group_name, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=group_name)
        wanted: list[Permission] = []
        for perm in perms:
            app_label, codename = perm.split(".")
            wanted.extend(Permission.objects.filter(content_type__app_label=app_label, codename=codename))
        group.permissions.add(*wanted)
