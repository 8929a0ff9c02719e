from rest_framework.pagination import CursorPagination


class DefaultCursorPagination(CursorPagination):
    """Cursor pagination: stable under concurrent inserts and O(page) on large tables."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = "-id"


class IdCursorPagination(DefaultCursorPagination):
    ordering = "id"
