"""Pages: home (the user's studies), study overview, analysis plan, the account's API tokens."""

from django.urls import path

from . import docs_views, plan_views, views

urlpatterns = [
    path("", views.home, name="home"),
    path("new-study/", views.study_new, name="study-new"),
    path("studies/<slug:slug>/", views.study_overview, name="study-overview"),
    path("studies/<slug:slug>/data/", views.study_data, name="study-data"),
    path("studies/<slug:slug>/data/candidates/<int:candidate_id>/outputs/",
         views.candidate_outputs, name="study-candidate-outputs"),
    path("studies/<slug:slug>/plan/", plan_views.plan_page, name="study-plan"),
    path("studies/<slug:slug>/plan/edit/", plan_views.plan_edit, name="study-plan-edit"),
    path("studies/<slug:slug>/plan/<int:version>/lock/", plan_views.plan_lock_confirm,
         name="study-plan-lock"),
    path("docs/<str:page>/", docs_views.docs_page, name="docs-page"),
    path("docs/<str:folder>/<str:filename>", docs_views.docs_file, name="docs-file"),
    path("account/tokens/", views.tokens, name="account-tokens"),
    path("account/tokens/<int:token_id>/revoke", views.token_revoke,
         name="account-token-revoke"),
]
