"""The client's address behind nginx: believed only from trusted proxies, read from the right."""

import asyncio
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from arena.proxy_headers import TrustedProxies, client_address, client_from_trusted_proxies
from infra.deploy.layout import DEFAULT_TRUSTED_PROXIES
from infra.deploy.nginx import PROXY_HEADERS

NGINX = TrustedProxies.parse(["127.0.0.1", "::1", "unix"])


def test_behind_nginx_the_client_is_the_hop_nginx_wrote():
    assert client_address(peer="127.0.0.1", forwarded_for=["203.0.113.7"], trusted=NGINX) == (
        "203.0.113.7"
    )


def test_a_client_cannot_choose_its_address_by_sending_its_own_header():
    # The client wrote 198.51.100.1; nginx appended the address it saw, 203.0.113.7.
    spoofed = ["198.51.100.1, 203.0.113.7"]
    assert client_address(peer="127.0.0.1", forwarded_for=spoofed, trusted=NGINX) == ("203.0.113.7")
    # Split over several header lines, it reads the same.
    assert (
        client_address(
            peer="127.0.0.1", forwarded_for=["198.51.100.1", "203.0.113.7"], trusted=NGINX
        )
        == "203.0.113.7"
    )


def test_the_header_of_a_peer_that_is_not_a_trusted_proxy_is_ignored():
    assert client_address(peer="192.0.2.50", forwarded_for=["203.0.113.7"], trusted=NGINX) == (
        "192.0.2.50"
    )
    nobody_trusted = TrustedProxies.parse([])
    assert (
        client_address(peer="127.0.0.1", forwarded_for=["203.0.113.7"], trusted=nobody_trusted)
        == "127.0.0.1"
    )


def test_a_unix_socket_is_trusted_only_when_configured():
    assert client_address(peer=None, forwarded_for=["203.0.113.7"], trusted=NGINX) == "203.0.113.7"
    tcp_only = TrustedProxies.parse(["127.0.0.1"])
    assert client_address(peer=None, forwarded_for=["203.0.113.7"], trusted=tcp_only) is None


def test_a_chain_of_trusted_proxies_is_walked_to_the_first_untrusted_hop():
    load_balancer_and_nginx = TrustedProxies.parse(["127.0.0.1", "10.0.0.0/8"])
    assert (
        client_address(
            peer="127.0.0.1",
            forwarded_for=["198.51.100.1, 203.0.113.7, 10.1.2.3"],
            trusted=load_balancer_and_nginx,
        )
        == "203.0.113.7"
    )


def test_garbage_or_only_trusted_hops_give_the_nearest_checked_address():
    assert client_address(peer="127.0.0.1", forwarded_for=["junk, 127.0.0.1"], trusted=NGINX) == (
        "127.0.0.1"
    )
    assert client_address(peer="127.0.0.1", forwarded_for=[], trusted=NGINX) == "127.0.0.1"
    # A client's padding cannot push its address past the bound either.
    padded = [", ".join(["127.0.0.1"] * 100)]
    assert client_address(peer="127.0.0.1", forwarded_for=padded, trusted=NGINX) == "127.0.0.1"


def test_addresses_are_normalised():
    assert (
        client_address(peer="::ffff:127.0.0.1", forwarded_for=["::ffff:203.0.113.7"], trusted=NGINX)
        == "203.0.113.7"
    )
    assert client_address(peer="::1", forwarded_for=["[2001:db8::1]:443"], trusted=NGINX) == (
        "2001:db8::1"
    )


def test_a_malformed_setting_stops_the_site():
    with pytest.raises(ImproperlyConfigured, match="ARENA_TRUSTED_PROXIES"):
        TrustedProxies.parse(["nginx.local"])


def _scope_seen_by_app(scope: dict) -> dict:
    seen: dict = {}

    async def app(scope, receive, send):
        seen.update(scope)

    asyncio.run(client_from_trusted_proxies(app, NGINX)(scope, None, None))
    return seen


def test_the_asgi_scope_gets_the_client_and_scheme_from_a_trusted_proxy():
    seen = _scope_seen_by_app(
        {
            "type": "websocket",
            "client": None,  # nginx over the worker's Unix socket
            "scheme": "ws",
            "headers": [(b"x-forwarded-for", b"203.0.113.7"), (b"x-forwarded-proto", b"https")],
        }
    )
    assert seen["client"] == ["203.0.113.7", 0]
    assert seen["scheme"] == "wss"


def test_the_asgi_scope_of_an_untrusted_peer_is_left_alone():
    scope = {
        "type": "http",
        "client": ["192.0.2.50", 5555],
        "scheme": "http",
        "headers": [(b"x-forwarded-for", b"203.0.113.7"), (b"x-forwarded-proto", b"https")],
    }
    seen = _scope_seen_by_app(dict(scope))
    assert seen["client"] == ["192.0.2.50", 5555]
    assert seen["scheme"] == "http"


def test_a_client_on_nginxs_own_host_cannot_choose_its_address_either():
    """The kit trusts only nginx's sockets: a client connecting to nginx from 127.0.0.1 that
    writes its own header is read as 127.0.0.1, both from the header nginx now sends (its
    peer, replacing the client's) and from an appended one (an older site file)."""
    kit = TrustedProxies.parse(DEFAULT_TRUSTED_PROXIES.split(","))
    assert client_address(peer=None, forwarded_for=["127.0.0.1"], trusted=kit) == "127.0.0.1"
    appended = ["203.0.113.9, 127.0.0.1"]
    assert client_address(peer=None, forwarded_for=appended, trusted=kit) == "127.0.0.1"


def test_nginx_replaces_the_clients_forwarded_header_and_redirects_to_its_own_name():
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in PROXY_HEADERS
    shipped = (Path(__file__).parents[2] / "infra/deploy/nginx-site/rsi-arena.conf").read_text()
    assert "$proxy_add_x_forwarded_for" not in shipped
    assert "return 301 https://$server_name$request_uri;" in shipped and "$host$" not in shipped
