from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.credit import credit_reservations_reconcile, scaffold_budget_set
from agents.models import Agent
from agents.sandboxes import SandboxError
from agents.services import agent_deprovision, agent_provision
from cluster.backends.base import SubmitRefused
from cluster.slurm.cli import SlurmError


class Command(BaseCommand):
    help = (
        "Agents: provision (Unix user, sandbox, Slurm account, tokens) and deprovision;"
        " scaffold-budget sets what an agent's harness's own model calls may cost;"
        " reconcile-credit settles API calls whose proxy died before settling them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser("provision", help="create an agent and its sandbox").add_argument("name")
        actions.add_parser("deprovision", help="revoke an agent's access").add_argument("name")
        actions.add_parser("list", help="agents, their sandboxes and their credit")
        scaffold = actions.add_parser(
            "scaffold-budget",
            help="set what an agent's harness's own model calls may cost in all (USD)",
        )
        scaffold.add_argument("name")
        scaffold.add_argument("usd")
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
            elif options["action"] == "scaffold-budget":
                agent = scaffold_budget_set(
                    agent=Agent.objects.get(name=options["name"]),
                    limit_usd=_usd(options["usd"]),
                )
                self.stdout.write(
                    f"{agent.name}: scaffold budget ${agent.scaffold_credit_limit:.2f}"
                    f" (${agent.scaffold_credit_spent:.2f} spent)"
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
                    self.stdout.write(
                        f"{agent.name:<20} {state:<14} "
                        f"credit ${agent.credit_spent:.2f}/${agent.credit_limit:.2f}  "
                        f"scaffold ${agent.scaffold_credit_spent:.2f}/"
                        f"${agent.scaffold_credit_limit:.2f}  {agent.sandbox}"
                    )
        except Agent.DoesNotExist:
            raise CommandError(f"no agent called {options['name']!r}") from None
        except (ValueError, SandboxError, SlurmError, SubmitRefused) as exc:
            raise CommandError(str(exc)) from None


def _usd(text: str) -> Decimal:
    try:
        amount = Decimal(text)
    except InvalidOperation:
        raise CommandError(f"{text!r} is not an amount of USD") from None
    # The ledger's columns hold 14 digits, 6 of them after the point.
    if not amount.is_finite() or amount >= 10**8:
        raise CommandError(f"{text!r} is not an amount of USD below $100,000,000")
    return amount.quantize(Decimal("0.000001"))
