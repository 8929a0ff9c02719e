"""Django admin for leads. Output and item tables can hold 100k+ rows: list pages select
their relations in the same query and skip the full COUNT(*)."""

from __future__ import annotations

from django.contrib import admin

from reviewhub.admin_base import ReadOnlyInline

from .models import (
    AnalysisPlan,
    ApiToken,
    Candidate,
    Comparison,
    Criterion,
    Item,
    Membership,
    Output,
    RubricVersion,
    StratumDimension,
    Study,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ("user",)


class StratumDimensionInline(ReadOnlyInline):
    model = StratumDimension
    fields = ("position", "key", "name", "kind", "source", "config")
    # Changing the scheme must relabel every item; that happens in the API / import_study.
    show_change_link = False


@admin.register(Study)
class StudyAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "status", "owner", "is_simulated", "created_at")
    list_filter = ("status", "is_simulated")
    search_fields = ("slug", "name", "task_description")
    list_select_related = ("owner",)
    raw_id_fields = ("owner",)
    readonly_fields = ("created_at", "updated_at")
    inlines = (MembershipInline, StratumDimensionInline)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("study", "user", "role", "created_at")
    list_filter = ("role", "study")
    search_fields = ("study__slug", "user__username")
    list_select_related = ("study", "user")
    raw_id_fields = ("user", "study")


class CriterionInline(admin.StackedInline):
    model = Criterion
    extra = 0
    fields = ("position", "key", "name", "scale", "guidance", "points", "min", "max",
              "pass_threshold", "pass_labels", "is_hard_gate", "weight", "needs_context")


@admin.register(RubricVersion)
class RubricVersionAdmin(admin.ModelAdmin):
    list_display = ("study", "version", "created_by", "created_at", "notes")
    list_filter = ("study",)
    search_fields = ("study__slug", "notes")
    list_select_related = ("study", "created_by")
    readonly_fields = ("created_at",)
    inlines = (CriterionInline,)


@admin.register(Criterion)
class CriterionAdmin(admin.ModelAdmin):
    list_display = ("key", "name", "scale", "rubric", "is_hard_gate", "weight", "position")
    list_filter = ("scale", "is_hard_gate", "rubric__study")
    search_fields = ("key", "name", "guidance")
    list_select_related = ("rubric", "rubric__study")


@admin.register(StratumDimension)
class StratumDimensionAdmin(admin.ModelAdmin):
    list_display = ("study", "key", "kind", "source", "position")
    list_filter = ("kind", "study")
    search_fields = ("key", "name", "source")
    list_select_related = ("study",)


@admin.register(Item)
class ItemAdmin(admin.ModelAdmin):
    list_display = ("external_id", "study", "input_format", "strata", "created_at")
    list_filter = ("study", "input_format")
    search_fields = ("external_id", "input")
    list_select_related = ("study",)
    show_full_result_count = False
    readonly_fields = ("strata", "created_at", "updated_at")
    list_per_page = 50


@admin.register(Candidate)
class CandidateAdmin(admin.ModelAdmin):
    list_display = ("name", "study", "provider", "model_id", "model_version", "model_family")
    list_filter = ("study", "provider")
    search_fields = ("name", "model_id", "notes")
    list_select_related = ("study",)


class HasErrorFilter(admin.SimpleListFilter):
    title = "generation error"
    parameter_name = "has_error"

    def lookups(self, request, model_admin):
        return (("yes", "Errored"), ("no", "No error"))

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.exclude(error="")
        if self.value() == "no":
            return queryset.filter(error="")
        return queryset


@admin.register(Output)
class OutputAdmin(admin.ModelAdmin):
    list_display = ("id", "study", "candidate", "item", "short_text", "has_error",
                    "schema_valid", "latency_ms", "cost")
    list_filter = ("study", HasErrorFilter, "schema_valid", "candidate")
    search_fields = ("item__external_id", "text", "candidate__name")
    list_select_related = ("study", "candidate", "item")
    show_full_result_count = False
    raw_id_fields = ("item", "candidate", "study")
    list_per_page = 50
    # Outputs come from ingest; the admin is for looking, not editing (rows feed verdicts).
    readonly_fields = ("study", "candidate", "item", "text", "parsed_json", "latency_ms",
                       "tokens_in", "tokens_out", "cost", "error", "finish_reason",
                       "schema_valid", "metadata", "created_at", "updated_at")

    @admin.display(description="text")
    def short_text(self, obj: Output) -> str:
        return obj.text[:80] + ("…" if len(obj.text) > 80 else "")

    @admin.display(boolean=True, description="error")
    def has_error(self, obj: Output) -> bool:
        return obj.has_error

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Comparison)
class ComparisonAdmin(admin.ModelAdmin):
    list_display = ("id", "study", "item", "output_a", "output_b", "created_at")
    list_filter = ("study",)
    search_fields = ("item__external_id",)
    list_select_related = ("study", "item")
    raw_id_fields = ("item", "output_a", "output_b", "study")
    show_full_result_count = False


@admin.register(AnalysisPlan)
class AnalysisPlanAdmin(admin.ModelAdmin):
    list_display = ("study", "version", "is_locked", "locked_by", "locked_at", "created_by",
                    "created_at")
    list_filter = ("study", ("locked_at", admin.EmptyFieldListFilter))
    search_fields = ("study__slug", "notes")
    list_select_related = ("study", "locked_by", "created_by")
    readonly_fields = ("created_at", "locked_at", "locked_by")

    @admin.display(boolean=True, description="locked")
    def is_locked(self, obj: AnalysisPlan) -> bool:
        return obj.is_locked

    def get_readonly_fields(self, request, obj=None):
        # A locked plan is frozen here too: changes are new versions (API / import_study).
        if obj is not None and obj.is_locked:
            return [f.name for f in obj._meta.fields]
        return super().get_readonly_fields(request, obj)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "name", "user", "study", "can_write", "created_at",
                    "last_used_at", "revoked_at")
    list_filter = ("can_write", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("prefix", "name", "user__username")
    list_select_related = ("user", "study")
    # The hash is useless to a person and the secret is never stored.
    exclude = ("key_hash",)
    readonly_fields = ("prefix", "user", "study", "created_at", "last_used_at")

    def has_add_permission(self, request) -> bool:
        return False
