"""The base of OpenMates' REST views: JSON bodies only, nested at most ``MAX_JSON_DEPTH``.

Every app's API view derives from :class:`JsonOnlyApi`, so all of ``/api/`` answers the
same way: a body that is not JSON answers 415, one nested deeper than
:data:`MAX_JSON_DEPTH` answers 400 ``{"code": "too_deeply_nested"}``, and a request without
credentials answers 401 with the API token's ``Bearer`` challenge.
"""

from __future__ import annotations

from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import APIException, NotFound
from rest_framework.pagination import CursorPagination
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.views import APIView

MAX_JSON_DEPTH = 32


class TooDeeplyNested(APIException):
    """A JSON body nested deeper than :data:`MAX_JSON_DEPTH` (400, stable code)."""

    status_code = 400
    default_code = "too_deeply_nested"

    def __init__(self) -> None:
        super().__init__(
            {
                "code": "too_deeply_nested",
                "message": f"JSON bodies nest at most {MAX_JSON_DEPTH} levels",
            }
        )


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists/objects deeper than ``limit`` (iterative, no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, refusing bodies nested deeper than :data:`MAX_JSON_DEPTH`.

    Raises:
        TooDeeplyNested: too deep (also when the decoder itself runs out of recursion).
        rest_framework.exceptions.ParseError: not JSON (from DRF's parser).
    """

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise TooDeeplyNested() from None
        if _depth_exceeds(data, MAX_JSON_DEPTH):
            raise TooDeeplyNested()
        return data


class JsonOnlyApi(APIView):
    """Base of the REST views: JSON bodies only, depth-limited."""

    parser_classes = [StrictJSONParser]

    def get_authenticate_header(self, request: Request) -> str:
        """The first authenticator's challenge that exists (the API token's ``Bearer``).

        DRF asks only the first class, the session, which has none, and then turns "no
        credentials" into 403; with a challenge it is 401, as HTTP means it.
        """
        for authenticator in self.get_authenticators():
            header = authenticator.authenticate_header(request)
            if header:
                return str(header)
        return ""


class TimestampCursorPagination(CursorPagination):
    """DRF's cursor pagination (50 a page, ``page_size`` up to 200) over a timestamp ordering.

    Subclasses set ``ordering`` (a timestamp field first, then ``-id``). A cursor whose
    position is not a timestamp answers 404 ``not_found`` instead of a database error.
    """

    page_size = 50
    max_page_size = 200
    page_size_query_param = "page_size"

    def decode_cursor(self, request: Request) -> Any:
        """DRF's cursor, refusing a position that is not a timestamp (404 ``not_found``)."""
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            try:
                valid = parse_datetime(str(cursor.position)) is not None
            except ValueError:
                valid = False
            if not valid:
                raise NotFound(self.invalid_cursor_message)
        return cursor
