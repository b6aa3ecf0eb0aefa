"""drf-spectacular: documents ``ApiTokenAuthentication`` as an HTTP bearer scheme and
``CsrfCheckedSessionAuthentication`` as drf-spectacular's session cookie scheme.

Imported by ``AccountsConfig.ready`` only when ``drf_spectacular`` is installed, so the
OpenAPI schema (once the project serves one) lists ``Authorization: Bearer`` next to the
session cookie.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.authentication import SessionScheme
from drf_spectacular.extensions import OpenApiAuthenticationExtension


class CsrfCheckedSessionScheme(SessionScheme):
    """``cookieAuth`` (the session cookie), as drf-spectacular documents DRF's session
    authentication, which this class only changes the CSRF error code of."""

    target_class = "accounts.authentication.CsrfCheckedSessionAuthentication"
    priority = 0


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme ``apiToken``: ``Authorization: Bearer om_<prefix>_<secret>``."""

    target_class = "accounts.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        """The scheme object for ``components.securitySchemes``."""
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "om_<prefix>_<secret> (create with manage.py create_api_key)",
        }
