from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from . import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    # Each app owns its own api_urls.py (REST) and urls.py (pages).
    path("api/", include("studies.api_urls")),
    path("api/", include("studies.ingest_urls")),
    path("api/", include("judges.api_urls")),
    path("api/", include("judges.run_api_urls")),
    path("api/", include("annotations.api_urls")),
    path("api/", include("reports.api_urls")),
    path("", include("studies.urls")),
    path("", include("judges.urls")),
    path("", include("judges.run_urls")),
    path("", include("annotations.urls")),
    path("", include("reports.urls")),
]
