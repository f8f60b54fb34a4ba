from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.firewall import FirewallError, firewall_from_settings, firewall_sync, format_ports
from security.checks import Skipped
from security.deployment import deployment_checks


class Command(BaseCommand):
    help = (
        "Security of this deployment: `check` reports each problem with its fix (exit 1 if "
        "any); `firewall` (re)installs the rules keeping agents off the platform's ports and "
        "blocks every active agent's Unix user again (after a reboot)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser("check", help="check the deployment against the trust boundaries")
        actions.add_parser("firewall", help="install the firewall and block every active agent")

    def handle(self, *args: object, **options: Any) -> None:
        if options["action"] == "firewall":
            self._firewall()
        else:
            self._check()

    def _firewall(self) -> None:
        firewall = firewall_from_settings()
        try:
            uids = firewall_sync(firewall=firewall)
        except FirewallError as failed:
            raise CommandError(str(failed)) from None
        state = firewall.state()
        if state is None:
            self.stdout.write("no firewall (AGENTS_FIREWALL=none): nothing installed")
            return
        self.stdout.write(
            f"firewall installed: {len(uids)} active agent(s) blocked "
            f"({len(state.uids)} uids in the set) from ports {format_ports(state.ports)}"
        )

    def _check(self) -> None:
        found = 0
        for check in deployment_checks():
            try:
                problems = check.run()
            except Skipped as why:
                self.stdout.write(f"skipped  {check.name}: {why}")
                continue
            if not problems:
                self.stdout.write(f"ok       {check.name}")
            for problem in problems:
                self.stdout.write(f"PROBLEM  {check.name}: {problem}")
            found += len(problems)
        if found:
            raise CommandError(f"{found} problem(s) found", returncode=1)
        self.stdout.write("no problems found")
