"""Django admin for annotation work: sampling plans, queue, assignments, annotations with
their revision history, gold labels and adjudications."""

from __future__ import annotations

from django.contrib import admin

from reviewhub.admin_base import ReadOnlyInline

from .models import (
    Adjudication,
    Annotation,
    AnnotationRevision,
    Assignment,
    GoldLabel,
    QueueEntry,
    SamplingPlan,
)


@admin.register(SamplingPlan)
class SamplingPlanAdmin(admin.ModelAdmin):
    list_display = ("study", "version", "rubric", "k", "gold_rate", "is_active", "created_by",
                    "created_at")
    list_filter = ("is_active", "study")
    search_fields = ("study__slug",)
    list_select_related = ("study", "rubric", "created_by")


@admin.register(QueueEntry)
class QueueEntryAdmin(admin.ModelAdmin):
    list_display = ("id", "plan", "output", "comparison", "is_gold", "needed", "done_count")
    list_filter = ("is_gold", "plan__study")
    list_select_related = ("plan",)
    raw_id_fields = ("plan", "output", "comparison")
    show_full_result_count = False
    list_per_page = 50


@admin.register(Assignment)
class AssignmentAdmin(admin.ModelAdmin):
    list_display = ("id", "entry", "annotator", "status", "lease_expires_at", "started_at",
                    "finished_at")
    list_filter = ("status",)
    search_fields = ("annotator__username",)
    list_select_related = ("entry", "annotator")
    raw_id_fields = ("entry", "annotator")
    show_full_result_count = False


class AnnotationRevisionInline(ReadOnlyInline):
    model = AnnotationRevision
    fields = ("recorded_at", "value", "severity", "severity_note", "rationale", "flags")


@admin.register(Annotation)
class AnnotationAdmin(admin.ModelAdmin):
    list_display = ("id", "annotator", "criterion", "output", "comparison", "value",
                    "severity", "source", "created_at", "revised_at")
    list_filter = ("source", "criterion__key", "severity")
    search_fields = ("annotator__username", "value", "rationale")
    list_select_related = ("annotator", "criterion")
    raw_id_fields = ("annotator", "criterion", "output", "comparison", "assignment", "plan")
    show_full_result_count = False
    list_per_page = 50
    inlines = (AnnotationRevisionInline,)


@admin.register(GoldLabel)
class GoldLabelAdmin(admin.ModelAdmin):
    list_display = ("id", "criterion", "output", "comparison", "value", "created_by",
                    "created_at")
    list_filter = ("criterion__key",)
    list_select_related = ("criterion", "created_by")
    raw_id_fields = ("criterion", "output", "comparison")


@admin.register(Adjudication)
class AdjudicationAdmin(admin.ModelAdmin):
    list_display = ("id", "criterion", "output", "comparison", "value", "adjudicated_by",
                    "created_at")
    list_filter = ("criterion__key",)
    search_fields = ("note", "value")
    list_select_related = ("criterion", "adjudicated_by")
    raw_id_fields = ("criterion", "output", "comparison", "adjudicated_by")
