"""Building blocks shared by every app that keeps records: append-only querysets and
read-only admin pages. History is evidence; nothing in the portal rewrites it."""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib import admin
from django.db import models
from django.http import HttpRequest

_M = TypeVar("_M", bound=models.Model)


class AppendOnlyQuerySet(models.QuerySet[_M]):
    """History is never rewritten: bulk updates and deletes are refused."""

    def update(self, **kwargs: Any) -> int:
        raise PermissionError(f"{self.model._meta.verbose_name} history is append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise PermissionError(f"{self.model._meta.verbose_name} history is append-only")


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    """An admin page to look, never to add, change or delete."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
