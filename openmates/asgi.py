"""ASGI entry point: HTTP through Django, WebSockets through Channels.

``daphne openmates.asgi:application`` serves both. The WebSocket stack checks the
``Origin`` header against ``ALLOWED_HOSTS`` before anything else (docs/protocol.md §2), refuses a
session-cookie handshake from another origin (``accounts.ws_origin``), then authenticates
by API token when the handshake presents one, else by session (``accounts.ws_auth``).
HTTP requests under ``/api/``, ``/v1/`` and ``/channels/`` first pass
``openmates.body_limit``: a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is refused before
Django reads it, and a chunked body reaches Django with its length.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openmates.settings")
# One BLAS thread, set before numpy loads: pre-processing's numpy work is small matrix
# products per message, and OpenBLAS's second thread spun on the other core after each
# (2.0 ms of wall time cost 3.9 ms of CPU per embedding, against 2.3 ms and 2.3 ms with
# one thread), taking it from the event loop and the database calls on a 2-core machine.
# An operator's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Django must be set up before anything imports models (the WebSocket routes do).
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from accounts.ws_auth import ApiTokenAuthMiddlewareStack  # noqa: E402
from accounts.ws_origin import CookieOriginGuard  # noqa: E402
from openmates import daphne_http, daphne_ws, gc_tuning, switch_interval  # noqa: E402
from openmates.body_limit import BodyLimit  # noqa: E402
from openmates.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": BodyLimit(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(
            CookieOriginGuard(ApiTokenAuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
# Daphne, when it serves this: close codes on failure, no sends after the close.
daphne_ws.install()
daphne_http.install()
# The event loop gets the GIL back within half a millisecond from busy threads.
switch_interval.apply()
# Last: what start-up created is frozen out of the collector's reach.
gc_tuning.apply()
