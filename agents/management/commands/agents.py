from __future__ import annotations

import argparse
import json
import time
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections

from agents.credit import credit_reservations_reconcile, scaffold_budget_set
from agents.models import Agent
from agents.runs.selectors import runs_overview
from agents.runs.services import RunRefused, run_start, run_stop, runs_supervise
from agents.sandboxes import SandboxError
from agents.services import agent_deprovision, agent_provision
from arena.competition.selectors import phase_running
from cluster.backends.base import SubmitRefused
from cluster.slurm.cli import SlurmError


class Command(BaseCommand):
    help = (
        "Agents: provision (Unix user, sandbox, Slurm account, tokens) and deprovision;"
        " scaffold-budget sets what an agent's harness's own model calls may cost;"
        " reconcile-credit settles API calls whose proxy died before settling them;"
        " run, stop, runs and supervise drive agents' scaffolds (agents/runs/README.md)."
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
        run = actions.add_parser("run", help="start an agent's scaffold as its Unix user")
        run.add_argument("name")
        run.add_argument("--harness", choices=["arena", "command"], required=True)
        run.add_argument("--model", default="", help="the upstream its scaffold calls")
        run.add_argument("--cpus", type=float)
        run.add_argument("--memory-mib", type=int)
        run.add_argument("--processes", type=int)
        run.add_argument("--hours", type=float, help="wall clock (default: the phase's end)")
        run.add_argument("--max-restarts", type=int)
        # Last: everything after it is the scaffold's argv, options included.
        run.add_argument("--command", nargs=argparse.REMAINDER, default=[], metavar="ARGV")
        stop = actions.add_parser("stop", help="end an agent's run and all its processes")
        stop.add_argument("name")
        stop.add_argument("--wait", type=float, default=60.0, metavar="SECONDS")
        runs = actions.add_parser("runs", help="agents' runs, newest first")
        runs.add_argument("--json", action="store_true")
        supervise = actions.add_parser("supervise", help="supervise runs (the phases worker does)")
        supervise.add_argument("--every", type=float, default=5.0, metavar="SECONDS")
        supervise.add_argument("--once", action="store_true")

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
            elif options["action"] in ("run", "stop", "runs", "supervise"):
                getattr(self, f"_{options['action']}")(options)
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
        except (RunRefused, ValueError, SandboxError, SlurmError, SubmitRefused) as exc:
            raise CommandError(str(exc)) from None

    def _run(self, options: dict[str, Any]) -> None:
        agent = Agent.objects.get(name=options["name"])
        run = run_start(
            agent=agent,
            harness=options["harness"],
            model=options["model"],
            command=options["command"],
            cpus=options["cpus"],
            memory_mib=options["memory_mib"],
            max_processes=options["processes"],
            hours=options["hours"],
            max_restarts=options["max_restarts"],
            phase=phase_running(),
        )
        self.stdout.write(
            f"run {run.pk} of {agent.name}: {run.state}, until {run.deadline:%Y-%m-%d %H:%M} UTC"
        )

    def _stop(self, options: dict[str, Any]) -> None:
        run = run_stop(agent=Agent.objects.get(name=options["name"]))
        deadline = time.monotonic() + options["wait"]
        while not run.finished and time.monotonic() < deadline:
            time.sleep(0.2)
            run.refresh_from_db()
        if not run.finished:
            raise CommandError(f"run {run.pk} is still {run.state}; its keeper is ending it")
        self.stdout.write(f"run {run.pk} of {options['name']}: {run.state} ({run.detail})")

    def _runs(self, options: dict[str, Any]) -> None:
        rows = runs_overview()
        if options["json"]:
            self.stdout.write(json.dumps(rows, indent=1, default=str))
            return
        if not rows:
            self.stdout.write("no runs")
        for row in rows:
            self.stdout.write(
                f"{row['id']:>5} {row['agent']:<16} {row['harness']:<8} {row['state']:<9}"
                f" attempt {row['attempts']}/{row['max_restarts'] + 1}"
                f" until {row['deadline']:%Y-%m-%d %H:%M}  {row['detail']}"
            )

    def _supervise(self, options: dict[str, Any]) -> None:
        while True:
            close_old_connections()
            for change in runs_supervise():
                self.stdout.write(str(change))
            self.stdout.flush()
            if options["once"]:
                return
            time.sleep(options["every"])


def _usd(text: str) -> Decimal:
    try:
        amount = Decimal(text)
    except InvalidOperation:
        raise CommandError(f"{text!r} is not an amount of USD") from None
    # The ledger's columns hold 14 digits, 6 of them after the point.
    if not amount.is_finite() or amount >= 10**8:
        raise CommandError(f"{text!r} is not an amount of USD below $100,000,000")
    return amount.quantize(Decimal("0.000001"))
