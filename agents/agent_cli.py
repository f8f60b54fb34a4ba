#!/usr/bin/env python3
"""arena-agent: the RSI Arena agent CLI, over the agent API (/api/v1/).

Standard library only, so it runs with any Python 3.9+ inside a sandbox; provisioning puts a
copy at ~/.arena/bin/arena-agent. Reads ARENA_URL and ARENA_TOKEN from the environment, else
from ~/.arena/config. Every read command takes --json.

  arena-agent budget [--json]
  arena-agent submit SCRIPT|--wrap CMD --time MINUTES [--gpus N] [--nodes N] [--preemptible]
                     [--name NAME] [--workdir DIR] [-e KEY=VALUE ...] [--json]
  arena-agent jobs [--json]
  arena-agent job ID [--json]
  arena-agent cancel ID
  arena-agent data register PATH --rows N --tokens N --source ID_OR_URL [--source ...]
                     --licence LICENCE --reason TEXT [--json]
  arena-agent data list [--json]
  arena-agent checkpoints register PATH --job ID [--data ID ...] [--parent ID] [--json]
  arena-agent checkpoints list [--json]
  arena-agent nominate CHECKPOINT_ID --card MODEL_CARD.md
  arena-agent nominations [--json]
  arena-agent evals [--json]                     your scores (proxy benchmarks), Pareto set, post-peak
  arena-agent evals run CHECKPOINT_ID [--benchmark NAME ...] [--json]
  arena-agent evals runs [--json]
  arena-agent evals show RUN_ID [--items] [--json]
  arena-agent evals cancel RUN_ID [--json]
  arena-agent evals pareto [--json]
  arena-agent journal add TEXT [--kind hypothesis|result|decision|note] [--json]
  arena-agent journal list [--limit N] [--json]   your journal (append-only), oldest first
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any


class CliError(Exception):
    pass


def load_config() -> tuple[str, str]:
    values = {}
    config = Path.home() / ".arena" / "config"
    if config.exists():
        for line in config.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#"):
                values[key.strip()] = value.strip()
    url = os.environ.get("ARENA_URL") or values.get("ARENA_URL")
    token = os.environ.get("ARENA_TOKEN") or values.get("ARENA_TOKEN")
    if not url or not token:
        raise CliError(
            "ARENA_URL and ARENA_TOKEN are not set and ~/.arena/config does not have them"
        )
    return url.rstrip("/"), token


def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    url, token = load_config()
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{url}/api/v1{path}",
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as failed:
        try:
            message = json.loads(failed.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {failed.code}"
        raise CliError(message) from None
    except urllib.error.URLError as failed:
        raise CliError(f"cannot reach {url}: {failed.reason}") from None


def show_budget(budget: dict[str, Any]) -> str:
    gpu, gpus, credit, storage = (
        budget["gpu_hours"],
        budget["gpus_running"],
        budget["api_credit_usd"],
        budget["storage"],
    )
    lines = [
        f"agent {budget['agent']} ({budget['period']})",
        f"GPU-hours     {gpu['used']:.2f} used, {gpu['left']:.2f} left of {gpu['limit']:g}",
        f"GPUs running  {gpus['normal']}/{gpus['normal_limit']} normal, {gpus['preemptible']}/{gpus['preemptible_limit']} preemptible",
        f"time per job  at most {budget['max_job_hours']} h",
        f"storage       {storage['used_gib']:.1f} GiB of {storage['limit_gib']} GiB",
        f"API credit    ${credit['spent']:.2f} spent, ${credit['left']:.2f} left of ${credit['limit']:g}",
    ]
    scaffold = budget.get("scaffold_credit_usd")
    if scaffold:  # the harness's own model calls, billed apart; set by the organizers
        lines.append(
            f"scaffold      ${scaffold['spent']:.2f} spent, ${scaffold['left']:.2f} left of ${scaffold['limit']:g} (your harness's own model calls)"
        )
    if budget.get("submissions_blocked"):
        lines.append(f"NOTE: you cannot submit jobs now: {budget['submissions_blocked']}")
    return "\n".join(lines)


def show_job(job: dict[str, Any]) -> str:
    waiting = f"  ({job['reason']})" if job.get("reason") else ""
    return (
        f"{job['id']:>8}  {job['name'][:24]:<24} {job['state']:<10} {job['gpus']:>2} GPU {job['qos']:<11} "
        f"{job['gpu_hours_charged']:.3f} GPU-h{waiting}"
    )


def show_leaderboard(board: dict[str, Any], *, raw: bool) -> str:
    table = board["raw"] if raw or not board.get("style_controlled") else board["style_controlled"]
    kind = "raw" if table is board["raw"] else "style-controlled"
    category = f", {board['category']} only" if board.get("category") else ""
    lines = [f"{board['phase']} leaderboard ({kind}{category}, {board['n_battles']} battles)"]
    for row in table["scores"]:
        mark = "  <- you" if row["model"] == board.get("own_model") else ""
        lines.append(
            f"{row['rank']:>3}. {row['model'][:32]:<32} {row['score']:7.1f}"
            f"  [{row['ci_low']:7.1f}, {row['ci_high']:7.1f}]  {row['n_battles']:>5} battles{mark}"
        )
    return "\n".join(lines)


def _score(entry: dict[str, Any]) -> str:
    if entry.get("score") is None:
        return "not scored" + (f" ({entry['error'][:80]})" if entry.get("error") else "")
    stderr = "" if entry.get("stderr") is None else f" ± {entry['stderr']:.3f}"
    return f"{entry['score']:.3f}{stderr} (n={entry['n']})"


def show_eval_run(run: dict[str, Any], *, items: bool = False) -> str:
    lines = [
        f"run {run['id']}: checkpoint {run['checkpoint']} on {', '.join(run['benchmarks'])}"
        f"  {run['state']}" + (f"  job {run['job']}" if run.get("job") else "")
    ]
    if run.get("error"):
        lines.append(f"  {run['error']}")
    for result in run["results"]:
        lines.append(f"  {result['benchmark']:<16} {_score(result)}")
        for item in result.get("items", []) if items else []:
            lines.append(
                f"      {item['item_id'][:24]:<24} {item['value']:.2f}  {item['answer'][:60]!r}"
            )
    return "\n".join(lines)


def show_progress(progress: dict[str, Any]) -> str:
    lines = []
    for key, headline in progress["headlines"].items():
        marks = [m for m, on in (("Pareto", key in progress["pareto"]),
                                 ("chosen", key == progress["chosen"])) if on]  # fmt: skip
        lines.append(f"checkpoint {key:>6}  headline {_score(headline)}  {' '.join(marks)}")
    for key, why in progress.get("without_headline", {}).items():
        lines.append(f"checkpoint {key:>6}  no headline: {why}")
    if not lines:
        lines.append("no evaluated checkpoint yet")
    lines.append(f"Pareto set: {', '.join(progress['pareto']) or '-'}")
    warning = progress.get("post_peak")
    if warning:
        stderr = "" if warning["drop_stderr"] is None else f" ± {warning['drop_stderr']:.3f}"
        lines.append(
            f"WARNING post-peak: checkpoint {warning['chosen']} is below your earlier checkpoint"
            f" {warning['best']} (drop {warning['drop']:.3f}{stderr})"
        )
    return "\n".join(lines)


def show_evals(result: dict[str, Any]) -> str:
    lines = []
    for checkpoint in result["checkpoints"]:
        lines.append(f"checkpoint {checkpoint['checkpoint_id']} ({checkpoint['phase']})")
        for bench in checkpoint["benchmarks"]:
            lines.append(f"  {bench['benchmark']:<16} {_score(bench)}")
    return "\n".join([*lines, show_progress(result["progress"])])


def evals_command(args: argparse.Namespace) -> None:
    if args.action == "run":
        run = call(
            "POST", "/evals/runs", {"checkpoint": args.checkpoint, "benchmarks": args.benchmark}
        )
        print(json.dumps(run) if args.json else show_eval_run(run))
    elif args.action == "runs":
        result = call("GET", "/evals/runs")
        lines = "\n\n".join(show_eval_run(run) for run in result["runs"])
        print(json.dumps(result) if args.json else lines or "no evaluation runs")
    elif args.action == "show":
        run = call("GET", f"/evals/runs/{urllib.parse.quote(args.id, safe='')}")
        print(json.dumps(run) if args.json else show_eval_run(run, items=args.items))
    elif args.action == "cancel":
        run = call("POST", f"/evals/runs/{urllib.parse.quote(args.id, safe='')}/cancel")
        print(json.dumps(run) if args.json else show_eval_run(run))
    elif args.action == "pareto":
        progress = call("GET", "/evals")["progress"]
        print(json.dumps(progress) if args.json else show_progress(progress))
    else:
        result = call("GET", "/evals")
        print(json.dumps(result) if args.json else show_evals(result))


def journal_command(args: argparse.Namespace) -> None:
    if args.action == "add":
        text = sys.stdin.read() if args.text == "-" else args.text
        entry = call("POST", "/journal", {"text": text, "kind": args.kind})
        print(json.dumps(entry) if args.json else f"journal entry {entry['id']} ({entry['kind']})")
        return
    result = call("GET", f"/journal?limit={args.limit}")
    lines = [
        f"{e['created_at'][:19]}  {e['kind']:<10}  {e['phase'] or '-'}\n" + _indented(e["text"])
        for e in result["entries"]
    ]
    print(json.dumps(result) if args.json else "\n".join(lines) or "no journal entries")


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines() or [""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="arena-agent", description="The RSI Arena agent CLI.")
    commands = parser.add_subparsers(dest="command", required=True)
    budget = commands.add_parser("budget", help="what you have used and have left")
    budget.add_argument("--json", action="store_true")
    submit = commands.add_parser("submit", help="submit a job (a bash script or --wrap)")
    submit.add_argument("script", nargs="?", type=Path)
    submit.add_argument("--wrap", help="a command to run instead of a script")
    submit.add_argument("--time", type=int, required=True, metavar="MINUTES")
    submit.add_argument("--gpus", type=int, default=1, help="GPUs per node")
    submit.add_argument("--nodes", type=int, default=1)
    submit.add_argument("--preemptible", action="store_true")
    submit.add_argument("--name", default="job")
    submit.add_argument("--workdir", default=".", help="relative to your sandbox")
    submit.add_argument("-e", "--env", action="append", default=[], metavar="KEY=VALUE")
    submit.add_argument("--json", action="store_true")
    jobs = commands.add_parser("jobs", help="your jobs")
    jobs.add_argument("--json", action="store_true")
    job = commands.add_parser("job", help="one job, with the end of its output")
    job.add_argument("id")
    job.add_argument("--json", action="store_true")
    cancel = commands.add_parser("cancel", help="cancel a job")
    cancel.add_argument("id")
    data = commands.add_parser(
        "data", help="record where your training data came from"
    ).add_subparsers(dest="action", required=True)
    data_register = data.add_parser("register", help="record a data file or folder (append-only)")
    data_register.add_argument("path")
    data_register.add_argument("--rows", type=int, required=True)
    data_register.add_argument("--tokens", type=int, required=True)
    data_register.add_argument(
        "--source", action="append", required=True, help="a data set id or URL"
    )
    data_register.add_argument("--licence", required=True)
    data_register.add_argument("--reason", required=True, help="why you use this data")
    data_register.add_argument("--json", action="store_true")
    data.add_parser("list", help="your data records").add_argument("--json", action="store_true")
    checkpoints = commands.add_parser("checkpoints", help="your checkpoints").add_subparsers(
        dest="action", required=True
    )
    checkpoint_register = checkpoints.add_parser(
        "register", help="validate and record a checkpoint"
    )
    checkpoint_register.add_argument("path")
    checkpoint_register.add_argument("--job", required=True, help="the completed job that made it")
    checkpoint_register.add_argument(
        "--data", type=int, action="append", default=[], help="a data record id"
    )
    checkpoint_register.add_argument("--parent", type=int, help="the checkpoint it started from")
    checkpoint_register.add_argument("--json", action="store_true")
    checkpoints.add_parser("list", help="your checkpoints").add_argument(
        "--json", action="store_true"
    )
    nominate = commands.add_parser("nominate", help="nominate a checkpoint for the current phase")
    nominate.add_argument("checkpoint", type=int)
    nominate.add_argument(
        "--card", type=Path, required=True, help="model card: Markdown with YAML front matter"
    )
    commands.add_parser("nominations", help="your nominations").add_argument(
        "--json", action="store_true"
    )
    votes = commands.add_parser("votes", help="the votes on your model").add_subparsers(
        dest="action", required=True
    )
    votes_export = votes.add_parser(
        "export", help="your model's battles as JSONL (Chatbot Arena clean-battle format)"
    )
    votes_export.add_argument("--phase", help="the phase (default: the latest you were given)")
    votes_export.add_argument(
        "--output", "-o", type=Path, help="write here instead of standard output"
    )
    standings = commands.add_parser("leaderboard", help="the leaderboard you were given")
    standings.add_argument("--phase", help="the phase (default: the latest you were given)")
    standings.add_argument("--raw", action="store_true", help="without style control")
    standings.add_argument(
        "--category",
        help="only battles of one category: coding, math, creative_writing, "
        "instruction_following, long_query, multi_turn, non_english, hard",
    )
    standings.add_argument("--json", action="store_true")
    evals = commands.add_parser("evals", help="evaluate your checkpoints on proxy benchmarks")
    evals.add_argument("--json", action="store_true")
    evals_actions = evals.add_subparsers(dest="action")
    evals_run = evals_actions.add_parser(
        "run", help="evaluate a registered checkpoint (a job charged to your account)"
    )
    evals_run.add_argument("checkpoint", type=int, help="a checkpoint id")
    evals_run.add_argument(
        "--benchmark", action="append", default=[], help="a proxy benchmark (default: all)"
    )
    evals_run.add_argument("--json", action="store_true")
    evals_actions.add_parser("runs", help="your evaluation runs").add_argument(
        "--json", action="store_true"
    )
    evals_show = evals_actions.add_parser("show", help="one run, with its scores")
    evals_show.add_argument("id")
    evals_show.add_argument("--items", action="store_true", help="every item's score and answer")
    evals_show.add_argument("--json", action="store_true")
    evals_cancel = evals_actions.add_parser(
        "cancel", help="cancel a queued or running run (its GPU-hours so far are charged)"
    )
    evals_cancel.add_argument("id")
    evals_cancel.add_argument("--json", action="store_true")
    evals_actions.add_parser("pareto", help="your Pareto set and post-peak warning").add_argument(
        "--json", action="store_true"
    )
    journal_help = "your experiment journal: hypotheses, results, decisions (append-only)"
    journal = commands.add_parser(
        "journal", help=journal_help, description=journal_help
    ).add_subparsers(dest="action", required=True)
    journal_add = journal.add_parser("add", help="write an entry (it cannot be changed later)")
    journal_add.add_argument("text", help="the entry; '-' reads it from standard input")
    journal_add.add_argument(
        "--kind", default="note", choices=["hypothesis", "result", "decision", "note"]
    )
    journal_add.add_argument("--json", action="store_true")
    journal_list = journal.add_parser("list", help="your latest entries, oldest first")
    journal_list.add_argument("--limit", type=int, default=100, help="at most 500")
    journal_list.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    try:
        if args.command == "budget":
            result = call("GET", "/budget")
            print(json.dumps(result) if args.json else show_budget(result))
        elif args.command == "submit":
            if bool(args.script) == bool(args.wrap):
                raise CliError("give a script file or --wrap COMMAND (one of them)")
            script = f"#!/bin/bash\n{args.wrap}\n" if args.wrap else args.script.read_text()
            env = dict(item.split("=", 1) for item in args.env if "=" in item)
            if len(env) != len(args.env):
                raise CliError("-e takes KEY=VALUE")
            result = call("POST", "/jobs", {
                "name": args.name, "script": script, "nodes": args.nodes, "gpus_per_node": args.gpus,
                "time_limit_minutes": args.time, "preemptible": args.preemptible,
                "workdir": args.workdir, "env": env,
            })  # fmt: skip
            print(json.dumps(result) if args.json else f"submitted job {result['id']}")
        elif args.command == "jobs":
            result = call("GET", "/jobs")
            print(
                json.dumps(result)
                if args.json
                else "\n".join(map(show_job, result["jobs"])) or "no jobs"
            )
        elif args.command == "job":
            result = call("GET", f"/jobs/{args.id}")
            print(
                json.dumps(result)
                if args.json
                else show_job(result) + "\n" + result.get("output_tail", "")
            )
        elif args.command == "cancel":
            result = call("POST", f"/jobs/{args.id}/cancel")
            print(f"job {result['id']}: {result['state']}")
        elif args.command == "data" and args.action == "register":
            result = call("POST", "/data", {
                "path": args.path, "rows": args.rows, "tokens": args.tokens, "sources": args.source,
                "licence": args.licence, "reason": args.reason,
            })  # fmt: skip
            print(
                json.dumps(result)
                if args.json
                else f"data record {result['id']}: {result['sha256']}"
            )
        elif args.command == "data":
            result = call("GET", "/data")
            lines = [
                f"{r['id']:>5}  {r['rows']:>9} rows {r['tokens']:>11} tokens  {r['path']}"
                for r in result["data"]
            ]
            print(json.dumps(result) if args.json else "\n".join(lines) or "no data records")
        elif args.command == "nominate":
            result = call(
                "POST",
                "/nomination",
                {"checkpoint": args.checkpoint, "model_card": args.card.read_text()},
            )
            print(f"nominated checkpoint {result['checkpoint']} for {result['phase']}")
        elif args.command == "nominations":
            result = call("GET", "/nomination")
            lines = [
                f"{n['phase']:<12} checkpoint {n['checkpoint']}  (changed {n['updated_at']})"
                for n in result["nominations"]
            ]
            print(json.dumps(result) if args.json else "\n".join(lines) or "no nominations")
        elif args.command == "votes":
            query = f"?phase={urllib.parse.quote(args.phase)}" if args.phase else ""
            result = call("GET", f"/votes{query}")
            lines = "".join(json.dumps(row, sort_keys=True) + "\n" for row in result["battles"])  # type: ignore[assignment]  # `lines` is a list in another branch
            if args.output is None:
                sys.stdout.write(lines)  # type: ignore[arg-type]  # a str here (the line above)
            else:
                args.output.write_text(lines)
                print(
                    f"{len(result['battles'])} battles of {result['own_model']} in"
                    f" {result['phase']} written to {args.output}",
                    file=sys.stderr,
                )
        elif args.command == "evals":
            evals_command(args)
        elif args.command == "journal":
            journal_command(args)
        elif args.command == "leaderboard":
            asked = {"phase": args.phase, "category": args.category}
            query = urllib.parse.urlencode({k: v for k, v in asked.items() if v})
            result = call("GET", f"/leaderboard{'?' + query if query else ''}")
            print(json.dumps(result) if args.json else show_leaderboard(result, raw=args.raw))
        elif args.action == "register":
            result = call("POST", "/checkpoints", {
                "path": args.path, "job": args.job, "data_records": args.data, "parent": args.parent,
            })  # fmt: skip
            print(json.dumps(result) if args.json else f"checkpoint {result['id']} registered")
        else:
            result = call("GET", "/checkpoints")
            lines = [
                f"{c['id']:>5}  job {c['job']:>8}  parent {c['parent'] or '-':>5}  {c['path']}"
                for c in result["checkpoints"]
            ]
            print(json.dumps(result) if args.json else "\n".join(lines) or "no checkpoints")
    except CliError as failed:
        print(f"arena-agent: {failed}", file=sys.stderr)
        return 1
    except OSError as failed:
        print(f"arena-agent: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
