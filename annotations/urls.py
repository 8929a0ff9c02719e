"""Pages: grading (annotators) and the lead pages of a study's annotation work."""

from django.urls import path

from . import views

urlpatterns = [
    path("studies/<slug:slug>/grade/", views.grade, name="annotations-grade"),
    path("studies/<slug:slug>/grade/<int:assignment_id>/submit/", views.grade_submit,
         name="annotations-grade-submit"),
    path("studies/<slug:slug>/grade/<int:assignment_id>/skip/", views.grade_skip,
         name="annotations-grade-skip"),
    path("studies/<slug:slug>/grade/<int:assignment_id>/heartbeat/", views.grade_heartbeat,
         name="annotations-grade-heartbeat"),
    path("studies/<slug:slug>/my-annotations/<int:annotation_id>/revise/",
         views.annotation_revise_page, name="annotations-revise"),
    path("studies/<slug:slug>/annotation/queue/", views.lead_queue,
         name="annotations-lead-queue"),
    path("studies/<slug:slug>/annotation/disagreements/", views.lead_disagreements,
         name="annotations-lead-disagreements"),
    path("studies/<slug:slug>/annotation/members/", views.lead_members,
         name="annotations-lead-members"),
    path("invitations/", views.my_invitations, name="annotations-my-invitations"),
    path("studies/<slug:slug>/annotation/plans/", views.lead_plans,
         name="annotations-lead-plans"),
]
