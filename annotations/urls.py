"""Pages: grading (annotators) and the lead pages of a study's annotation work."""

from django.urls import path

from reviewhub.routes import routes

from . import views

urlpatterns = [
    *routes("studies/<slug:slug>/", [
        ("grade/", views.grade, "annotations-grade"),
        ("grade/<int:assignment_id>/submit/", views.grade_submit, "annotations-grade-submit"),
        ("grade/<int:assignment_id>/skip/", views.grade_skip, "annotations-grade-skip"),
        ("grade/<int:assignment_id>/heartbeat/", views.grade_heartbeat,
         "annotations-grade-heartbeat"),
        ("my-annotations/<int:annotation_id>/revise/", views.annotation_revise_page,
         "annotations-revise"),
        ("annotation/queue/", views.lead_queue, "annotations-lead-queue"),
        ("annotation/disagreements/", views.lead_disagreements, "annotations-lead-disagreements"),
        ("annotation/members/", views.lead_members, "annotations-lead-members"),
        ("annotation/plans/", views.lead_plans, "annotations-lead-plans"),
    ]),
    path("invitations/", views.my_invitations, name="annotations-my-invitations"),
]
