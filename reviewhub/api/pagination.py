from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.pagination import CursorPagination


class DefaultCursorPagination(CursorPagination):
    """Cursor pagination: stable under concurrent inserts and O(page) on large tables."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = "-id"


class IdCursorPagination(DefaultCursorPagination):
    ordering = "id"


_PAGE_SERIALIZERS: dict[type[Any], type[serializers.Serializer[Any]]] = {}

PAGE_PARAMETERS = [
    OpenApiParameter("cursor", OpenApiTypes.STR, description="The `next`/`previous` cursor of "
                                                             "an earlier page."),
    OpenApiParameter("page_size", OpenApiTypes.INT,
                     description=f"Items per page (default {DefaultCursorPagination.page_size}, "
                                 f"at most {DefaultCursorPagination.max_page_size})."),
]


def paginated(serializer_class: type[serializers.Serializer[Any]]
              ) -> type[serializers.Serializer[Any]]:
    """The OpenAPI shape of a cursor page of `serializer_class` ({next, previous, results}).

    For APIViews that paginate by hand (a ListAPIView's schema is paginated already): with
    `responses={200: serializer(many=True)}` the schema promised a bare array.
    """
    page = _PAGE_SERIALIZERS.get(serializer_class)
    if page is None:
        name = serializer_class.__name__.removesuffix("Serializer")
        page = type(f"Paginated{name}List", (serializers.Serializer,), {
            "next": serializers.URLField(allow_null=True, help_text="The next page, if any."),
            "previous": serializers.URLField(allow_null=True,
                                             help_text="The previous page, if any."),
            "results": serializer_class(many=True),
            "__module__": serializer_class.__module__,
        })
        _PAGE_SERIALIZERS[serializer_class] = page
    return page
