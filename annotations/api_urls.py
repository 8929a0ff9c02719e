"""REST routes of the annotation app (included under /api/)."""

from django.urls import path

from . import api

S = "studies/<slug:slug>/"

urlpatterns = [
    # annotators
    path(f"{S}queue/next", api.QueueNextView.as_view(), name="annotations-api-next"),
    path(
        f"{S}assignments/<int:assignment_id>",
        api.AssignmentDetailView.as_view(),
        name="annotations-api-assignment",
    ),
    path(
        f"{S}assignments/<int:assignment_id>/heartbeat",
        api.AssignmentHeartbeatView.as_view(),
        name="annotations-api-heartbeat",
    ),
    path(
        f"{S}assignments/<int:assignment_id>/submit",
        api.AssignmentSubmitView.as_view(),
        name="annotations-api-submit",
    ),
    path(
        f"{S}assignments/<int:assignment_id>/skip",
        api.AssignmentSkipView.as_view(),
        name="annotations-api-skip",
    ),
    path(f"{S}my/annotations", api.MyAnnotationsView.as_view(), name="annotations-api-mine"),
    path(
        f"{S}my/annotations/<int:annotation_id>",
        api.MyAnnotationDetailView.as_view(),
        name="annotations-api-mine-detail",
    ),
    # leads (the member list and role changes live in studies: /api/studies/<slug>/members)
    path(f"{S}sampling-plans", api.SamplingPlanListView.as_view(), name="annotations-api-plans"),
    path(
        f"{S}sampling-plans/<int:version>",
        api.SamplingPlanDetailView.as_view(),
        name="annotations-api-plan",
    ),
    path(f"{S}annotation-progress", api.ProgressView.as_view(), name="annotations-api-progress"),
    path(
        f"{S}disagreements", api.DisagreementsView.as_view(), name="annotations-api-disagreements"
    ),
    path(
        f"{S}adjudications",
        api.AdjudicationListView.as_view(),
        name="annotations-api-adjudications",
    ),
    path(f"{S}gold-labels", api.GoldLabelListView.as_view(), name="annotations-api-gold"),
    path(f"{S}annotators/invite", api.MemberInviteView.as_view(), name="annotations-api-invite"),
    # the invited account: its invitations, accepted or declined
    path("invitations", api.MyInvitationsView.as_view(), name="annotations-api-invitations"),
    path("invitations/<int:invitation_id>/accept",
         api.MyInvitationAcceptView.as_view(),
         name="annotations-api-invitation-accept"),
    path("invitations/<int:invitation_id>/decline",
         api.MyInvitationDeclineView.as_view(),
         name="annotations-api-invitation-decline"),
    path(
        f"{S}annotators/<int:user_id>/reset-password",
        api.MemberPasswordResetView.as_view(),
        name="annotations-api-reset-password",
    ),
    path(
        f"{S}annotations/export",
        api.AnnotationExportView.as_view(),
        name="annotations-api-export",
    ),
]
