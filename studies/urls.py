"""Pages: home (the user's studies), study overview, the account's API tokens."""

from django.urls import path

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("new-study/", views.study_new, name="study-new"),
    path("studies/<slug:slug>/", views.study_overview, name="study-overview"),
    path("studies/<slug:slug>/data/", views.study_data, name="study-data"),
    path("studies/<slug:slug>/data/candidates/<int:candidate_id>/outputs/",
         views.candidate_outputs, name="study-candidate-outputs"),
    path("account/tokens/", views.tokens, name="account-tokens"),
    path("account/tokens/<int:token_id>/revoke", views.token_revoke,
         name="account-token-revoke"),
]
