"""Pieces the apps' Django admins share."""

from __future__ import annotations

from typing import Any

from django.contrib import admin


class ReadOnlyInline(admin.TabularInline):
    """A parent's rows listed for reference and never edited in the admin (versions, history,
    schemes whose change must go through the API): every listed field is read-only, and no row
    is added or deleted here."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: Any, obj: Any = None) -> Any:
        return self.fields or ()

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False
