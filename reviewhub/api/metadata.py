"""What an OPTIONS request answers on every API view.

DRF's SimpleMetadata also describes the PUT/POST body by calling `get_object()` and
`get_serializer()`, which run no access check and fail (500) on the views that have no
queryset (rubric, strata). The request bodies are in the OpenAPI schema (/api/schema/); OPTIONS
names the view and the media types it renders and parses, and `Allow` lists its methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rest_framework.metadata import SimpleMetadata
from rest_framework.request import Request

if TYPE_CHECKING:  # rest_framework.views imports this module through its settings
    from rest_framework.views import APIView


class ViewMetadata(SimpleMetadata):
    def determine_metadata(self, request: Request, view: APIView) -> dict[str, Any]:
        return {
            "name": view.get_view_name(),
            "description": view.get_view_description(),
            "renders": [renderer.media_type for renderer in view.renderer_classes],
            "parses": [parser.media_type for parser in view.parser_classes],
        }
