"""Django admin for judges: configurations, versions, runs, jobs and verdicts (large tables
skip the full count and select their relations)."""

from __future__ import annotations

from django.contrib import admin

from reviewhub.admin_base import ReadOnlyInline

from .models import Judge, JudgeJob, JudgeRun, JudgeVersion, Verdict


class JudgeVersionInline(ReadOnlyInline):
    model = JudgeVersion
    fields = ("version", "content_hash", "model_family", "created_at")


@admin.register(Judge)
class JudgeAdmin(admin.ModelAdmin):
    list_display = ("name", "study", "kind", "created_by", "created_at")
    list_filter = ("kind", "study")
    search_fields = ("name", "description")
    list_select_related = ("study", "created_by")
    inlines = (JudgeVersionInline,)


@admin.register(JudgeVersion)
class JudgeVersionAdmin(admin.ModelAdmin):
    list_display = ("judge", "version", "short_hash", "model_family", "created_at")
    list_filter = ("judge__study", "model_family")
    search_fields = ("judge__name", "content_hash")
    list_select_related = ("judge",)
    # Versions are immutable: a different config is a different version.
    readonly_fields = ("judge", "version", "content_hash", "config", "model_family",
                       "created_at")

    def has_add_permission(self, request, obj=None) -> bool:
        # Every field is read-only, so the add form saved an empty row (a 500 on the NOT NULL
        # version); versions come only from a config through judges.services.
        return False

    @admin.display(description="hash")
    def short_hash(self, obj: JudgeVersion) -> str:
        return obj.content_hash[:12]


@admin.register(JudgeRun)
class JudgeRunAdmin(admin.ModelAdmin):
    list_display = ("id", "study", "judge_version", "status", "max_cost", "max_calls",
                    "created_by", "created_at", "finished_at")
    list_filter = ("status", "study")
    search_fields = ("judge_version__judge__name",)
    list_select_related = ("study", "judge_version", "judge_version__judge", "created_by")
    raw_id_fields = ("judge_version",)
    filter_horizontal = ("criteria",)


@admin.register(JudgeJob)
class JudgeJobAdmin(admin.ModelAdmin):
    list_display = ("id", "run", "criterion", "output", "comparison", "sample_index", "order",
                    "status", "attempts", "http_status", "cost")
    list_filter = ("status", "order")
    search_fields = ("provider_request_id", "error")
    list_select_related = ("run", "criterion")
    raw_id_fields = ("run", "judge_version", "criterion", "output", "comparison")
    show_full_result_count = False
    list_per_page = 50


@admin.register(Verdict)
class VerdictAdmin(admin.ModelAdmin):
    list_display = ("id", "judge_version", "criterion", "output", "comparison", "is_scored",
                    "value", "value_num", "probability", "source", "created_at")
    list_filter = ("is_scored", "source", "criterion__key")
    search_fields = ("value", "rationale", "output__item__external_id")
    list_select_related = ("judge_version", "judge_version__judge", "criterion")
    raw_id_fields = ("judge_version", "criterion", "output", "comparison", "run")
    show_full_result_count = False
    list_per_page = 50
