"""The base of OpenMates' REST views: JSON bodies only, nested at most ``MAX_JSON_DEPTH``.

Every app's API view derives from :class:`JsonOnlyApi`, so all of ``/api/`` answers the
same way: a body that is not JSON answers 415, one nested deeper than
:data:`MAX_JSON_DEPTH` answers 400 ``{"code": "too_deeply_nested"}``, and a request without
credentials answers 401 with the API token's ``Bearer`` challenge.

Input serializers build their fields from the strict ones here (:class:`StrictCharField`,
:class:`StrictSlugField`, :class:`StrictRegexField`, :class:`StrictChoiceField`,
:class:`StrictIntegerField`, :class:`StrictBooleanField`): a JSON value of the wrong type
answers 400 ``invalid`` instead of being coerced (DRF's own ``CharField`` turns ``42``
into ``"42"``, its ``IntegerField`` takes ``"42"`` and ``42.0``, its ``BooleanField``
takes ``"true"`` and ``1``).
"""

from __future__ import annotations

from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework import serializers
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


def depth_exceeds(value: Any, limit: int) -> bool:
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
        if depth_exceeds(data, MAX_JSON_DEPTH):
            raise TooDeeplyNested()
        return data


class StringOnly(serializers.Field):
    """Mixin for DRF's text fields: only a JSON string is text (400 ``invalid`` otherwise).

    Put it before the DRF field in the bases; ``None`` still reaches DRF's own
    ``allow_null`` handling before this runs.
    """

    default_error_messages = {"not_a_string": "must be a JSON string"}

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class StrictCharField(StringOnly, serializers.CharField):
    """DRF's ``CharField`` that takes only a JSON string."""


class StrictSlugField(StringOnly, serializers.SlugField):
    """DRF's ``SlugField`` that takes only a JSON string."""


class StrictRegexField(StringOnly, serializers.RegexField):
    """DRF's ``RegexField`` that takes only a JSON string."""


class StrictChoiceField(StringOnly, serializers.ChoiceField):
    """DRF's ``ChoiceField`` (string choices) that takes only a JSON string, so ``1`` never
    matches the choice ``"1"``."""


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: strings, floats and booleans are refused (as in the protocol)."""

    default_error_messages = {"not_an_integer": "must be a JSON integer"}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("not_an_integer")
        return int(super().to_internal_value(data))


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean: ``"true"``, ``1`` and the like are refused."""

    default_error_messages = {"not_a_boolean": "must be a JSON boolean"}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("not_a_boolean")
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


class InvalidCursor(APIException):
    """A ``cursor`` query parameter that is no cursor this list made (400 ``invalid_cursor``):
    the list exists, the parameter is wrong (DRF's own answer is 404)."""

    status_code = 400
    default_code = "invalid_cursor"
    default_detail = "Invalid cursor: use the next or previous link of a page."


class InvalidPageSize(APIException):
    """A ``page_size`` query parameter that is not a whole number of at least 1 (400
    ``invalid_page_size``; DRF's own answer is the default page, silently)."""

    status_code = 400
    default_code = "invalid_page_size"
    default_detail = "page_size must be a whole number from 1 to 200."


def _page_size(paginator: CursorPagination, request: Request) -> int | None:
    """The page size ``request`` asks for: ``paginator.page_size`` without the parameter,
    at most ``max_page_size`` (a larger one is cut to it, as DRF does).

    Raises:
        InvalidPageSize: a value that is not a decimal integer ≥ 1.
    """
    raw = request.query_params.get(paginator.page_size_query_param or "page_size")
    if raw is None:
        return paginator.page_size
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise InvalidPageSize()
    return min(int(raw), int(paginator.max_page_size or int(raw)))


def _cursor_decoded(paginator: CursorPagination, request: Request, valid: Any) -> Any:
    """DRF's decoded cursor of ``request``, or :class:`InvalidCursor` when it does not
    decode or its position fails ``valid(position: str) -> bool``."""
    try:
        cursor = CursorPagination.decode_cursor(paginator, request)
    except NotFound:
        raise InvalidCursor() from None
    if cursor is not None and cursor.position is not None and not valid(str(cursor.position)):
        raise InvalidCursor()
    return cursor


def _is_timestamp(position: str) -> bool:
    try:
        return parse_datetime(position) is not None
    except ValueError:
        return False


def _is_row_id(position: str) -> bool:
    return position.isascii() and position.isdigit() and len(position) <= 19


class TimestampCursorPagination(CursorPagination):
    """DRF's cursor pagination (50 a page, ``page_size`` up to 200) over a timestamp ordering.

    Subclasses set ``ordering`` (a timestamp field first, then ``-id``). A cursor that does
    not decode, or whose position is not a timestamp, answers 400 ``invalid_cursor``
    (:class:`InvalidCursor`) instead of a database error.
    """

    page_size = 50
    max_page_size = 200
    page_size_query_param = "page_size"

    def decode_cursor(self, request: Request) -> Any:
        """DRF's cursor, refusing one whose position is not a timestamp."""
        return _cursor_decoded(self, request, _is_timestamp)

    def get_page_size(self, request: Request) -> int | None:
        """The requested ``page_size`` (:func:`_page_size`: 400 ``invalid_page_size``)."""
        return _page_size(self, request)


class IdCursorPagination(CursorPagination):
    """DRF's cursor pagination (50 a page, ``page_size`` up to 200) over an integer
    primary key, for rows without a timestamp (``ordering`` ``("id",)``, oldest first).
    A cursor that does not decode, or whose position is not a decimal integer, answers
    400 ``invalid_cursor`` instead of a database error."""

    page_size = 50
    max_page_size = 200
    page_size_query_param = "page_size"
    ordering = ("id",)

    def decode_cursor(self, request: Request) -> Any:
        """DRF's cursor, refusing one whose position is not an integer."""
        return _cursor_decoded(self, request, _is_row_id)

    def get_page_size(self, request: Request) -> int | None:
        """The requested ``page_size`` (:func:`_page_size`: 400 ``invalid_page_size``)."""
        return _page_size(self, request)


class NoUnknownFields(serializers.Serializer):
    """Refuses fields the serializer does not declare (400 ``invalid`` naming them)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({key: ["unknown field"] for key in unknown})
        return super().to_internal_value(data)
