from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.credit import credit_reservations_reconcile
from agents.models import Agent
from agents.sandboxes import SandboxError
from agents.services import agent_deprovision, agent_provision
from cluster.backends.base import SubmitRefused
from cluster.slurm.cli import SlurmError


class Command(BaseCommand):
    help = (
        "Agents: provision (Unix user, sandbox, Slurm account, tokens) and deprovision;"
        " reconcile-credit settles API calls whose proxy died before settling them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser("provision", help="create an agent and its sandbox").add_argument("name")
        actions.add_parser("deprovision", help="revoke an agent's access").add_argument("name")
        actions.add_parser("list", help="agents and their sandboxes")
        actions.add_parser(
            "reconcile-credit",
            help="charge calls still in flight after the call timeout their reservation",
        )

    def handle(self, *args: object, **options: Any) -> None:
        try:
            if options["action"] == "provision":
                done = agent_provision(name=options["name"])
                self.stdout.write(
                    f"provisioned {done.agent.name}: Unix user {done.agent.unix_user}, sandbox "
                    f"{done.agent.sandbox}, Slurm account {done.agent.cluster_account}; "
                    f"credentials in {done.config_path}"
                )
            elif options["action"] == "deprovision":
                agent = agent_deprovision(name=options["name"])
                self.stdout.write(
                    f"deprovisioned {agent.name}: tokens revoked, jobs cancelled, login locked"
                )
            elif options["action"] == "reconcile-credit":
                settled = credit_reservations_reconcile()
                for call in settled:
                    self.stdout.write(
                        f"{call.agent.name}: call {call.pk} charged ${call.reserved_usd}"
                    )
                self.stdout.write(f"settled {len(settled)} reservation(s)")
            else:
                for agent in Agent.objects.all():
                    state = "active" if agent.active else "deprovisioned"
                    self.stdout.write(f"{agent.name:<20} {state:<14} {agent.sandbox}")
        except Agent.DoesNotExist:
            raise CommandError(f"no agent called {options['name']!r}") from None
        except (ValueError, SandboxError, SlurmError, SubmitRefused) as exc:
            raise CommandError(str(exc)) from None
