"""The client's address behind a reverse proxy, taken only from proxies we trust.

Behind nginx every connection a worker sees comes from nginx, so the per-network rate limit
(`ip_hash(REMOTE_ADDR)`) and the denied-networks middleware would see one address for
everyone. nginx appends the address it saw to `X-Forwarded-For`; anything to the left of it
was written by the client and proves nothing. So the address is read from the right: skip the
hops that are our own proxies (`ARENA_TRUSTED_PROXIES`) and take the first one that is not.
A client that sends its own `X-Forwarded-For` only adds entries to the left of the one nginx
wrote, and a client that reaches a worker without the proxy is not trusted at all, so its
header is ignored.

Daphne's own `--proxy-headers` is not used: it takes the left-most entry, the one the client
wrote, from any peer.

This is an ASGI wrapper, so HTTP and WebSockets (the battle socket's voter, the live board)
see the same address; Django builds `REMOTE_ADDR` from `scope["client"]`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# In ARENA_TRUSTED_PROXIES: connections over a Unix socket (no address), which only the
# proxy's user can open when the socket's folder is closed to everyone else.
UNIX_SOCKET = "unix"
# More hops than any real chain of proxies: a longer header is a client's padding.
MAX_FORWARDED_HOPS = 32


@dataclass(frozen=True)
class TrustedProxies:
    networks: tuple[Network, ...] = ()
    unix_socket: bool = False

    @classmethod
    def parse(cls, values: Iterable[str]) -> TrustedProxies:
        """`ARENA_TRUSTED_PROXIES` parsed; a malformed entry stops the site at startup."""
        networks: list[Network] = []
        unix_socket = False
        for value in values:
            value = value.strip()
            if value == UNIX_SOCKET:
                unix_socket = True
                continue
            try:
                networks.append(ipaddress.ip_network(value, strict=False))
            except ValueError:
                raise ImproperlyConfigured(
                    f"ARENA_TRUSTED_PROXIES: {value!r} is not an address, a network "
                    f"(127.0.0.1, 10.0.0.0/8) or {UNIX_SOCKET!r}"
                ) from None
        return cls(tuple(networks), unix_socket)

    def __bool__(self) -> bool:
        return bool(self.networks) or self.unix_socket

    def trusts(self, address: Address) -> bool:
        return any(address in network for network in self.networks)


def parse_address(value: str) -> Address | None:
    """An address as a proxy writes it, IPv4-mapped IPv6 read as IPv4; None if it is not one."""
    value = value.strip()
    if value.startswith("[") and "]" in value:  # [2001:db8::1]:443
        value = value[1 : value.index("]")]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def _peer_trusted(peer: str | None, trusted: TrustedProxies) -> bool:
    if peer is None:
        return trusted.unix_socket
    address = parse_address(peer)
    return address is not None and trusted.trusts(address)


def client_address(
    *, peer: str | None, forwarded_for: list[str], trusted: TrustedProxies
) -> str | None:
    """The client's address: the peer's own unless the peer is a trusted proxy, else the
    right-most `X-Forwarded-For` hop that is not a trusted proxy. `peer` None is a Unix
    socket. Returns None when there is no address at all (a Unix socket without the header)."""
    if not _peer_trusted(peer, trusted):
        return peer
    hops = [hop for value in forwarded_for for hop in value.split(",")]
    if len(hops) > MAX_FORWARDED_HOPS:
        hops = hops[-MAX_FORWARDED_HOPS:]
    nearest_trusted = peer
    for hop in reversed(hops):
        address = parse_address(hop)
        if address is None:
            # Garbage can only be a client's: the nearest hop we could check is the answer.
            break
        if not trusted.trusts(address):
            return str(address)
        nearest_trusted = str(address)
    return nearest_trusted


def _header_values(scope: Scope, name: bytes) -> list[str]:
    return [
        value.decode("latin-1") for key, value in scope.get("headers") or () if key.lower() == name
    ]


def forwarded_scheme(scope: Scope) -> str | None:
    """The scheme the client used, from the nearest proxy's `X-Forwarded-Proto`."""
    values = _header_values(scope, b"x-forwarded-proto")
    if not values:
        return None
    proto = values[-1].split(",")[-1].strip().lower()
    if proto not in {"http", "https"}:
        return None
    if scope["type"] == "websocket":
        return "wss" if proto == "https" else "ws"
    return proto


def client_from_trusted_proxies(app: ASGIApp, trusted: TrustedProxies) -> ASGIApp:
    """ASGI wrapper: behind a trusted proxy, `scope["client"]` is the client's address and
    `scope["scheme"]` the scheme it used; from any other peer the scope is left as it came."""
    if not trusted:
        return app

    async def resolved(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in {"http", "websocket"}:
            client = scope.get("client")
            peer = str(client[0]) if client else None
            if _peer_trusted(peer, trusted):
                address = client_address(
                    peer=peer,
                    forwarded_for=_header_values(scope, b"x-forwarded-for"),
                    trusted=trusted,
                )
                scope = {**scope, "client": [address, 0] if address else None}
                scheme = forwarded_scheme(scope)
                if scheme:
                    scope["scheme"] = scheme
        await app(scope, receive, send)

    return resolved
