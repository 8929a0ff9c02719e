from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from . import views
from .middleware import csp_policy

# Swagger UI comes from drf-spectacular-sidecar (pinned, served from our own origin) and the
# split view serves its start-up script as a same-origin file, so scripts stay 'self'-only.
# Its page still has one inline <style> block and the UI sets inline styles, hence the one
# relaxation on this page: style-src 'unsafe-inline'.
API_DOCS_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
    # Before the auth URLs: the reset page sends e-mail only when a mail server is configured.
    path("accounts/password_reset/", views.PasswordResetByEmailView.as_view(),
         name="password_reset"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", csp_policy(API_DOCS_CSP)(
        SpectacularSwaggerSplitView.as_view(url_name="api-schema")), name="api-docs"),
    # Each app owns its own api_urls.py (REST) and urls.py (pages).
    path("api/", include("studies.api_urls")),
    path("api/", include("studies.ingest_urls")),
    path("api/", include("judges.api_urls")),
    path("api/", include("generation.api_urls")),
    path("api/", include("annotations.api_urls")),
    path("api/", include("calibration.api_urls")),
    path("api/", include("reports.api_urls")),
    path("api/", include("imports.api_urls")),
    path("api/", include("monitoring.api_urls")),
    path("", include("studies.urls")),
    path("", include("judges.urls")),
    path("", include("generation.urls")),
    path("", include("annotations.urls")),
    path("", include("reports.urls")),
    path("", include("monitoring.urls")),
]

# JSON errors under /api/ for URLs that match no route (and for 500s); HTML pages elsewhere.
handler404 = "reviewhub.api.errors.not_found_handler"
handler500 = "reviewhub.api.errors.server_error_handler"
