"""Every admin page registered for studies, judges, annotations and reports renders, with
data present (list displays, filters and search are real fields)."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from tests.factories import UserFactory

APPS = {"studies", "judges", "annotations", "reports"}


@pytest.mark.django_db
def test_admin_changelists_and_change_pages(client, world_b):
    superuser = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(superuser)
    models = [m for m in admin.site._registry if m._meta.app_label in APPS]
    assert len(models) >= 15
    for model in models:
        opts = model._meta
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        response = client.get(url, {"q": "x"})
        assert response.status_code == 200, (url, response.status_code)
        obj = model._default_manager.first()
        if obj is not None:
            change = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
            assert client.get(change).status_code == 200, change


@pytest.mark.django_db
def test_output_admin_is_read_mostly(client, world_b):
    superuser = UserFactory(username="root2", is_staff=True, is_superuser=True)
    client.force_login(superuser)
    assert client.get(reverse("admin:studies_output_add")).status_code == 403
    page = client.get(reverse("admin:studies_output_changelist"), {"has_error": "yes"})
    assert page.status_code == 200
