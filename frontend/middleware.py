from __future__ import annotations

import ipaddress
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, JsonResponse

# Scripts only from our own static files: even if markup slipped through the sanitiser, an
# inline script or event handler in a model's answer would not run.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
    ]
)


def content_security_policy(get_response: Callable[[HttpRequest], HttpResponse]):
    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if not request.path.startswith("/admin/"):
            response.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response

    return middleware


# The voters' own paths: the page, prompt suggestions, battles and votes, the booth's kiosk. The leaderboard and
# the agent API (/api/v1/) are not voting.
VOTING_PATHS = ("/api/battles", "/api/prompts/", "/kiosk")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def denied_networks(values: list[str]) -> list[Network]:
    """`ARENA_VOTING_DENIED_NETWORKS` parsed; a malformed entry stops the site at startup."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"ARENA_VOTING_DENIED_NETWORKS: {value!r} is not a network (e.g. 10.20.0.0/16)"
            ) from None
    return networks


def voting_closed_to_agents(get_response: Callable[[HttpRequest], HttpResponse]):
    """Refuse the voting site to requests from the agents' networks: an agent that reached it
    could vote for its own model (issue 13, Sybil votes). The address is the connection's or,
    behind a trusted proxy, the client's as arena/proxy_headers.py reads it from the right of
    X-Forwarded-For: never what the client wrote there."""
    networks = denied_networks(settings.ARENA_VOTING_DENIED_NETWORKS)

    def middleware(request: HttpRequest) -> HttpResponse:
        if networks and (request.path == "/" or request.path.startswith(VOTING_PATHS)):
            try:
                address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
            except ValueError:
                address = None  # no address to trust: refused like an agent's
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
                address = address.ipv4_mapped  # a dual-stack socket's view of an IPv4 client
            if address is None or any(address in network for network in networks):
                return JsonResponse(
                    {
                        "error": "Voting is closed to this network.",
                        "code": "voting_network_denied",
                    },
                    status=403,
                )
        return get_response(request)

    return middleware
