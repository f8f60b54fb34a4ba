"""`python -m infra.deploy.cli up|down|status|nginx-site` (the `up`, `down`, `status` scripts
beside it call this; see README.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra.deploy.kit import down, print_status, up
from infra.deploy.layout import PUBLIC_RUNTIME_ROOT, DeployError, Layout
from infra.deploy.nginx import Site, site_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="infra/deploy",
        description="The arena behind nginx, supervised (infra/deploy/README.md).",
    )
    actions = parser.add_subparsers(dest="action", required=True)
    start = actions.add_parser("up", help="start nginx, the workers, the phase worker and the sync")
    start.add_argument("--workers", type=int, default=2, help="ASGI (daphne) workers (default 2)")
    start.add_argument("--port", type=int, default=8080, help="nginx's port (default 8080)")
    start.add_argument("--host", default="127.0.0.1", help="nginx's address (default 127.0.0.1)")
    start.add_argument(
        "--gateway-port",
        type=int,
        default=None,
        help="also serve the agents' gateway (API and proxy only) on this port",
    )
    start.add_argument(
        "--sync-every",
        type=int,
        default=60,
        metavar="SECONDS",
        help="accounting and storage sync period (default 60)",
    )
    start.add_argument(
        "--timeout",
        type=float,
        default=180,
        metavar="SECONDS",
        help="how long to wait for everything to answer (default 180)",
    )
    start.add_argument(
        "--no-migrate",
        dest="migrate",
        action="store_false",
        help="only check that migrations are applied",
    )
    actions.add_parser(
        "down", help="stop nginx, supervisord and everything they started (idempotent)"
    )
    actions.add_parser("status", help="what runs; exit 0 when everything does")
    site = actions.add_parser(
        "nginx-site", help="print the site config for a production nginx (sites-available)"
    )
    site.add_argument("--workers", type=int, default=2)
    site.add_argument(
        "--socket-dir",
        type=Path,
        default=PUBLIC_RUNTIME_ROOT,
        help="the workers' sockets are DIR/web-N.sock (default /run/rsi-arena, as the units)",
    )
    site.add_argument("--static-root", type=Path, default=Path("/srv/rsi-arena/static"))
    site.add_argument("--server-name", default="_")
    site.add_argument("--listen", default="80")
    site.add_argument("--tls-certificate", type=Path)
    site.add_argument("--tls-certificate-key", type=Path)
    site.add_argument(
        "--gateway-listen", default="", help="the agents' gateway, e.g. 8001 (empty: none)"
    )
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            if args.workers < 1:
                raise DeployError("--workers must be at least 1")
            up(
                workers=args.workers,
                port=args.port,
                host=args.host,
                sync_every=args.sync_every,
                timeout=args.timeout,
                migrate=args.migrate,
                gateway_port=args.gateway_port,
            )
            return 0
        if args.action == "down":
            down()
            return 0
        if args.action == "nginx-site":
            if bool(args.tls_certificate) != bool(args.tls_certificate_key):
                raise DeployError(
                    "give both --tls-certificate and --tls-certificate-key, or neither"
                )
            sockets = [args.socket_dir / f"web-{index}.sock" for index in range(args.workers)]
            site_text = site_config(
                Site(
                    sockets=sockets,
                    static_root=args.static_root,
                    listen=args.listen,
                    server_name=args.server_name,
                    tls_certificate=args.tls_certificate,
                    tls_certificate_key=args.tls_certificate_key,
                    gateway_listen=args.gateway_listen,
                )
            )
            print(site_text, end="")
            return 0
        return 0 if print_status(Layout.of()) else 3
    except DeployError as error:
        print(f"[deploy] error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
