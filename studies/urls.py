"""Pages: home (the user's studies) and study overview."""

from django.urls import path

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("studies/<slug:slug>/", views.study_overview, name="study-overview"),
]
