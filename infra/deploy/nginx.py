"""The nginx configuration of the arena: one text, rendered for this machine or for production.

`site_config` is the `upstream` and `server` blocks (what goes in
/etc/nginx/sites-available/ in production); `local_config` wraps them in a whole nginx.conf
whose pid, logs and temporary files live in the kit's own folders, so `infra/deploy/up` runs
an nginx of its own next to anything else on the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The headers every proxied location sets. nginx is the edge, so `X-Forwarded-For` is set to
# its peer and whatever the client sent is dropped: an appended header would let a client on a
# trusted address (nginx's own host) put any address left of it. Behind a load balancer, set
# nginx's real-IP module to that balancer first. The workers believe the header only from
# nginx's sockets (arena/proxy_headers.py).
# `Daphne-Root-Path` is dropped: daphne would take the client's value as the root path, which
# moves Django's routing (agents/gateway.py).
PROXY_HEADERS = """\
        proxy_http_version 1.1;
        proxy_set_header Host $http_host;
        proxy_set_header X-Forwarded-For $remote_addr;
        proxy_set_header X-Forwarded-Proto $scheme;
        proxy_set_header Daphne-Root-Path "";
        # Answers, agent events and the proxy stream: pass them on as they come.
        proxy_buffering off;"""


@dataclass(frozen=True)
class Site:
    sockets: list[Path]  # one Unix socket per ASGI worker
    static_root: Path
    listen: str  # "127.0.0.1:8080", or "80" in production
    server_name: str = "_"
    tls_certificate: Path | None = None  # with the key: a 443 server, and 80 redirects to it
    tls_certificate_key: Path | None = None
    gateway_listen: str = ""  # the agents' gateway (API and proxy only); "" for none
    upstream_keepalive: int = 64


def _locations(static_root: Path) -> str:
    return f"""\
    client_max_body_size 10m;

    location /static/ {{
        alias {static_root}/;
        expires 1h;
        add_header Cache-Control "public";
    }}

    location /ws/ {{
        proxy_pass http://rsi_arena_web;
{PROXY_HEADERS}
        proxy_set_header Upgrade $http_upgrade;
        proxy_set_header Connection $connection_upgrade;
        # The live board's screens stay connected all day.
        proxy_read_timeout 1d;
        proxy_send_timeout 1d;
    }}

    location / {{
        proxy_pass http://rsi_arena_web;
{PROXY_HEADERS}
        proxy_set_header Connection "";
    }}
"""


def _gateway(listen: str) -> str:
    return f"""
# The agents' gateway: the agent API and the proxy, nothing else (agents/gateway.py).
server {{
    listen {listen};
    server_name _;
    client_max_body_size 10m;

    location ^~ /api/v1/ {{
        proxy_pass http://rsi_arena_web;
{PROXY_HEADERS}
        proxy_set_header Connection "";
    }}

    location ^~ /proxy/v1/ {{
        proxy_pass http://rsi_arena_web;
{PROXY_HEADERS}
        proxy_set_header Connection "";
        proxy_read_timeout 10m;
    }}

    location / {{
        return 404 "Not found: this port serves the agent API (/api/v1/) and the proxy (/proxy/v1/).\\n";
    }}
}}
"""


def site_config(site: Site) -> str:
    servers = "\n".join(
        f"    server unix:{socket} max_fails=1 fail_timeout=2s;" for socket in site.sockets
    )
    text = f"""\
# RSI Arena behind nginx (rendered by infra/deploy/nginx.py; see infra/deploy/README.md).

map $http_upgrade $connection_upgrade {{
    default upgrade;
    ""      "";
}}

upstream rsi_arena_web {{
{servers}
    keepalive {site.upstream_keepalive};
}}
"""
    if site.tls_certificate and site.tls_certificate_key:
        text += f"""
server {{
    listen {site.listen};
    server_name {site.server_name};
    return 301 https://$server_name$request_uri;
}}

server {{
    listen 443 ssl http2;  # Debian 12's nginx 1.22: http2 is a listen flag
    server_name {site.server_name};
    ssl_certificate {site.tls_certificate};
    ssl_certificate_key {site.tls_certificate_key};
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:rsi_arena_tls:10m;
    add_header Strict-Transport-Security "max-age=31536000" always;

{_locations(site.static_root)}}}
"""
    else:
        text += f"""
server {{
    listen {site.listen};
    server_name {site.server_name};
    # For TLS, render with --tls-certificate and --tls-certificate-key (a 443 server, and this
    # port redirecting to it), and set ARENA_SECURE_COOKIES=1.

{_locations(site.static_root)}}}
"""
    if site.gateway_listen:
        text += _gateway(site.gateway_listen)
    return text


def local_config(
    site: Site,
    *,
    pid_file: Path,
    error_log: Path,
    access_log: Path,
    temp_dir: Path,
    user: str | None,
) -> str:
    """A whole nginx.conf for `nginx -c`: the site plus a main context of its own."""
    user_line = f"user {user} {user};\n" if user else ""
    temp_paths = "\n".join(
        f"    {kind}_temp_path {temp_dir / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    site_text = "\n".join(f"    {line}" if line else "" for line in site_config(site).splitlines())
    return f"""\
# Written by infra/deploy/up; rewritten on each start.
{user_line}worker_processes auto;
worker_rlimit_nofile 65536;
pid {pid_file};
error_log {error_log} warn;

events {{
    worker_connections 16384;
}}

http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 65;
    server_tokens off;
{temp_paths}
    # Which worker answered: `up` reads it to see every worker answer through nginx.
    log_format arena '$remote_addr [$time_iso8601] "$request" $status '
                     'upstream=$upstream_addr upstream_status=$upstream_status';
    access_log {access_log} arena;

{site_text}
}}
"""
