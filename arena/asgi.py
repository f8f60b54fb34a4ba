"""The ASGI entry point: HTTP through Django, WebSockets through Channels.

Serve it with `daphne arena.asgi:application` (or uvicorn); `manage.py runserver` uses daphne.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")
django_http = get_asgi_application()  # sets Django up before the consumers are imported

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from channels.sessions import SessionMiddlewareStack  # noqa: E402
from django.conf import settings  # noqa: E402

from agents.gateway import gateway_scope, websockets_off_gateway  # noqa: E402
from arena.outage import websocket_database_outage  # noqa: E402
from arena.proxy_headers import TrustedProxies, client_from_trusted_proxies  # noqa: E402
from frontend.routing import websocket_urlpatterns  # noqa: E402

# On the agents' gateway port a client's `Daphne-Root-Path` is dropped before anything routes;
# behind a trusted proxy the client's address is resolved before anything reads it.
application = client_from_trusted_proxies(
    gateway_scope(
        ProtocolTypeRouter(
            {
                "http": django_http,
                "websocket": websockets_off_gateway(
                    AllowedHostsOriginValidator(
                        SessionMiddlewareStack(
                            websocket_database_outage(URLRouter(websocket_urlpatterns))
                        )
                    )
                ),
            }
        )
    ),
    TrustedProxies.parse(settings.ARENA_TRUSTED_PROXIES),
)
