"""Django admin for report snapshots (read-mostly: results are computed, not typed in)."""

from __future__ import annotations

from django.contrib import admin

from snapshots.models import ReportSnapshot


@admin.register(ReportSnapshot)
class ReportSnapshotAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "study", "plan", "status", "short_fingerprint", "created_by",
                    "created_at", "computed_at")
    list_filter = ("kind", "status", "study")
    search_fields = ("study__slug", "input_fingerprint", "error")
    list_select_related = ("study", "plan", "created_by")
    readonly_fields = ("input_fingerprint", "result", "result_version", "error", "computed_at",
                       "created_at")

    @admin.display(description="inputs")
    def short_fingerprint(self, obj: ReportSnapshot) -> str:
        return obj.input_fingerprint[:12]
