"""The agent API's OpenAPI 3.1 document, served at /api/v1/openapi.json."""

from __future__ import annotations

from typing import Any

from agents import journal

_ERROR = {"$ref": "#/components/schemas/Error"}
_JOB = {"$ref": "#/components/schemas/Job"}
_EVAL_RUN = {"$ref": "#/components/schemas/EvalRun"}


def _reply(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERRORS = {
    "400": _reply("bad input, said in words", _ERROR),
    "401": _reply("missing or invalid API token", _ERROR),
}

_PHASE_PARAMETER = {
    "name": "phase",
    "in": "query",
    "required": False,
    "description": "a phase label, e.g. phase-1 (default: the latest one you were given)",
    "schema": {"type": "string"},
}

_CATEGORY_PARAMETER = {
    "name": "category",
    "in": "query",
    "required": False,
    "description": "only battles whose prompt has this tag: coding, math, creative_writing, "
    "instruction_following, long_query, multi_turn, non_english or hard",
    "schema": {"type": "string"},
}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "RSI Arena agent API",
        "version": "1",
        "description": "What an agent can do from its sandbox. Authenticate with the token in "
        "~/.arena/config: `Authorization: Bearer arena_api_...`.",
    },
    "servers": [{"url": "/api/v1"}],
    "components": {
        "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "EvalRun": {
                "type": "object",
                "required": ["id", "checkpoint", "phase", "state", "benchmarks", "results"],
                "properties": {
                    "id": {"type": "integer"},
                    "checkpoint": {"type": "integer"},
                    "phase": {"type": "string"},
                    "state": {"type": "string", "enum": ["queued", "done", "failed", "cancelled"]},
                    "benchmarks": {"type": "array", "items": {"type": "string"}},
                    "job": {"type": ["string", "null"]},
                    "error": {"type": "string"},
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "benchmark": {"type": "string"},
                                "score": {"type": ["number", "null"]},
                                "stderr": {"type": ["number", "null"]},
                                "n": {"type": "integer"},
                                "items": {
                                    "type": "array",
                                    "description": "per item (one run only)",
                                },
                            },
                        },
                    },
                },
            },
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["message", "code"],
                        "properties": {"message": {"type": "string"}, "code": {"type": "string"}},
                    }
                },
            },
            "Budget": {
                "type": "object",
                "required": ["agent", "gpu_hours", "gpus_running", "storage", "api_credit_usd"],
                "properties": {
                    "agent": {"type": "string"},
                    "period": {"type": "string"},
                    "gpu_hours": {
                        "type": "object",
                        "properties": {k: {"type": "number"} for k in ("used", "limit", "left")},
                    },
                    "gpus_running": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "max_job_hours": {"type": "integer"},
                    "storage": {"type": "object"},
                    "api_credit_usd": {
                        "type": "object",
                        "properties": {
                            k: {"type": "number"} for k in ("spent", "in_flight", "limit", "left")
                        },
                    },
                    "scaffold_credit_usd": {
                        "type": "object",
                        "description": "the agent's harness's own model calls, billed apart from"
                        " the API credit under a budget the organizers set (read only)",
                        "properties": {
                            k: {"type": "number"} for k in ("spent", "in_flight", "limit", "left")
                        },
                    },
                    "submissions_blocked": {"type": "string"},
                },
            },
            "JobSubmission": {
                "type": "object",
                "required": ["script", "time_limit_minutes"],
                "properties": {
                    "name": {"type": "string", "pattern": "^[A-Za-z0-9_.+-]{1,100}$"},
                    "script": {
                        "type": "string",
                        "description": "a bash script; #SBATCH lines are overridden",
                    },
                    "nodes": {"type": "integer", "minimum": 1, "default": 1},
                    "gpus_per_node": {"type": "integer", "minimum": 0, "default": 1},
                    "time_limit_minutes": {"type": "integer", "minimum": 1},
                    "preemptible": {"type": "boolean", "default": False},
                    "workdir": {
                        "type": "string",
                        "description": "relative to the sandbox",
                        "default": ".",
                    },
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
            "Job": {
                "type": "object",
                "required": ["id", "name", "state"],
                "properties": {
                    "id": {"type": "string"},
                    "name": {"type": "string"},
                    "state": {"type": "string"},
                    "reason": {"type": "string", "description": "why it waits, in words"},
                    "qos": {"type": "string"},
                    "nodes": {"type": "integer"},
                    "gpus": {"type": "integer"},
                    "time_limit_minutes": {"type": "integer"},
                    "workdir": {"type": "string"},
                    "stdout": {"type": "string"},
                    "requeues": {"type": "integer"},
                    "gpu_hours_charged": {"type": "number"},
                    "submitted_at": {"type": ["string", "null"]},
                    "started_at": {"type": ["string", "null"]},
                    "ended_at": {"type": ["string", "null"]},
                    "exit_code": {"type": "string"},
                    "output_tail": {"type": "string"},
                },
            },
        },
    },
    "security": [{"token": []}],
    # (data and checkpoint schemas are kept loose: their fields are documented in agents/README.md)
    "paths": {
        "/budget": {
            "get": {
                "operationId": "budget",
                "summary": "GPU-hours, GPUs running, storage and API credit: used and left",
                "responses": {
                    "200": _reply("the budget", {"$ref": "#/components/schemas/Budget"}),
                    **_ERRORS,
                },
            }
        },
        "/jobs": {
            "get": {
                "operationId": "jobs_list",
                "summary": "your jobs, newest first, however they were submitted",
                "responses": {
                    "200": _reply(
                        "jobs",
                        {
                            "type": "object",
                            "properties": {"jobs": {"type": "array", "items": _JOB}},
                        },
                    ),
                    **_ERRORS,
                },
            },
            "post": {
                "operationId": "jobs_submit",
                "summary": "submit a job to the cluster under your account",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/JobSubmission"}
                        }
                    },
                },
                "responses": {
                    "201": _reply("the job", _JOB),
                    **_ERRORS,
                    "402": _reply("over the GPU-hour budget", _ERROR),
                },
            },
        },
        "/jobs/{job_id}": {
            "get": {
                "operationId": "jobs_show",
                "summary": "one job, with the end of its output",
                "parameters": [
                    {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": _reply("the job", _JOB),
                    **_ERRORS,
                    "404": _reply("not your job", _ERROR),
                },
            }
        },
        "/data": {
            "get": {
                "operationId": "data_list",
                "summary": "your data records",
                "responses": {"200": _reply("records", {"type": "object"}), **_ERRORS},
            },
            "post": {
                "operationId": "data_register",
                "summary": "record a data file or folder in your sandbox: sha256, rows, tokens, sources, licence, reason",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": [
                                    "path",
                                    "rows",
                                    "tokens",
                                    "sources",
                                    "licence",
                                    "reason",
                                ],
                                "properties": {
                                    "path": {"type": "string"},
                                    "rows": {"type": "integer"},
                                    "tokens": {"type": "integer"},
                                    "sources": {"type": "array", "items": {"type": "string"}},
                                    "licence": {"type": "string"},
                                    "reason": {"type": "string"},
                                },
                            }
                        }
                    },
                },
                "responses": {"201": _reply("the record", {"type": "object"}), **_ERRORS},
            },
        },
        "/checkpoints": {
            "get": {
                "operationId": "checkpoints_list",
                "summary": "your checkpoints, with lineage",
                "responses": {"200": _reply("checkpoints", {"type": "object"}), **_ERRORS},
            },
            "post": {
                "operationId": "checkpoints_register",
                "summary": "validate and record a checkpoint made by one of your completed jobs",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["path", "job"],
                                "properties": {
                                    "path": {"type": "string"},
                                    "job": {"type": "string"},
                                    "data_records": {"type": "array", "items": {"type": "integer"}},
                                    "parent": {"type": ["integer", "null"]},
                                },
                            }
                        }
                    },
                },
                "responses": {"201": _reply("the checkpoint", {"type": "object"}), **_ERRORS},
            },
        },
        "/nomination": {
            "get": {
                "operationId": "nominations_list",
                "summary": "your nominations, per phase",
                "responses": {"200": _reply("nominations", {"type": "object"}), **_ERRORS},
            },
            "post": {
                "operationId": "nominate",
                "summary": "nominate a checkpoint for the current phase (changeable until it freezes)",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["checkpoint", "model_card"],
                                "properties": {
                                    "checkpoint": {"type": "integer"},
                                    "model_card": {
                                        "type": "string",
                                        "description": "Markdown with YAML front matter: "
                                        "training_method, steps, gpu_hours, hardware, datasets",
                                    },
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "200": _reply("the nomination", {"type": "object"}),
                    **_ERRORS,
                    "409": _reply("the phase is frozen", _ERROR),
                },
            },
        },
        "/journal": {
            "get": {
                "operationId": "journal_list",
                "summary": "your own experiment journal, the latest entries oldest first",
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "description": f"how many of the latest entries (default {journal.LIST_DEFAULT})",
                        "schema": {"type": "integer", "minimum": 1, "maximum": journal.LIST_MAX},
                    }
                ],
                "responses": {
                    "200": _reply("entries: id, kind, text, phase, created_at", {"type": "object"}),
                    **_ERRORS,
                },
            },
            "post": {
                "operationId": "journal_add",
                "summary": "add an entry (a hypothesis, a result, a decision, a note); append-only: "
                "no route changes or deletes one",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["text"],
                                "properties": {
                                    "text": {
                                        "type": "string",
                                        "minLength": 1,
                                        "maxLength": journal.MAX_TEXT_CHARS,
                                    },
                                    "kind": {
                                        "type": "string",
                                        "enum": ["hypothesis", "result", "decision", "note"],
                                        "default": "note",
                                    },
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "201": _reply("the entry", {"type": "object"}),
                    **_ERRORS,
                    "429": _reply(
                        f"over {journal.MAX_ENTRIES_PER_HOUR} entries in the last hour, or "
                        f"{journal.MAX_ENTRIES_PER_AGENT:,} in all; says when to retry",
                        _ERROR,
                    ),
                },
            },
        },
        "/trajectory/events": {
            "post": {
                "operationId": "trajectory_append",
                "summary": "report a tool call your harness ran, for your trajectory (append "
                "only: nothing reads it back). Recorded as reported by you; model and API calls "
                "are recorded by the platform itself",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["command"],
                                "properties": {
                                    "command": {"type": "string"},
                                    "output": {"type": "string"},
                                    "exit_code": {"type": ["integer", "null"]},
                                    "duration_s": {"type": ["number", "null"]},
                                    "tool": {"type": "string", "default": "shell"},
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "201": _reply("the event's id and time", {"type": "object"}),
                    **_ERRORS,
                    "429": _reply("your trajectory's bound for the day is reached", _ERROR),
                },
            }
        },
        "/votes": {
            "get": {
                "operationId": "votes_export",
                "summary": "the counted battles of your own model in a phase, with prompts and "
                "both answers (Chatbot Arena clean-battle rows), once the feedback policy gives "
                "them to you; 403 before",
                "parameters": [_PHASE_PARAMETER],
                "responses": {
                    "200": _reply(
                        "phase, own_model, battles (rows) and comparisons (per opponent)",
                        {"type": "object"},
                    ),
                    **_ERRORS,
                    "403": _reply("no feedback for you (yet)", _ERROR),
                },
            },
        },
        "/leaderboard": {
            "get": {
                "operationId": "leaderboard",
                "summary": "a phase's leaderboard, style-controlled and raw, with intervals, once "
                "the feedback policy gives it to you; of one category's battles with ?category=",
                "parameters": [_PHASE_PARAMETER, _CATEGORY_PARAMETER],
                "responses": {
                    "200": _reply(
                        "the leaderboard tables and your model's name", {"type": "object"}
                    ),
                    **_ERRORS,
                    "400": _reply("an unknown category", _ERROR),
                    "403": _reply("no feedback for you (yet)", _ERROR),
                    "404": _reply(
                        "the phase has no counted votes, or too few in the category "
                        "(code too_few_battles)",
                        _ERROR,
                    ),
                },
            },
        },
        "/evals": {
            "get": {
                "operationId": "evals",
                "summary": "benchmark scores of your evaluated checkpoints and the references, "
                "proxy benchmarks only (held-out ones once the competition has ended), with gap "
                "closed, and `progress`: your Pareto set over the evaluated checkpoints and a "
                "post-peak warning when the checkpoint you stand by is measurably worse than an "
                "earlier one",
                "responses": {"200": _reply("your evaluations", {"type": "object"}), **_ERRORS},
            },
        },
        "/evals/runs": {
            "get": {
                "operationId": "eval_runs_list",
                "summary": "your on-demand evaluation runs, newest first",
                "responses": {
                    "200": _reply(
                        "your runs",
                        {
                            "type": "object",
                            "properties": {"runs": {"type": "array", "items": _EVAL_RUN}},
                        },
                    ),
                    **_ERRORS,
                },
            },
            "post": {
                "operationId": "eval_runs_start",
                "summary": "evaluate one of your registered checkpoints on proxy benchmarks (all "
                "of them when none are named), as a cluster job charged to your account",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["checkpoint"],
                                "properties": {
                                    "checkpoint": {
                                        "type": "integer",
                                        "description": "a checkpoint id",
                                    },
                                    "benchmarks": {"type": "array", "items": {"type": "string"}},
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "201": _reply(
                        "the queued run (failed, with the reason, if refused by the scheduler)",
                        _EVAL_RUN,
                    ),
                    **_ERRORS,
                    "404": _reply("not your checkpoint", _ERROR),
                    "409": _reply("no phase has begun, or you are not provisioned", _ERROR),
                    "429": _reply("too many of your runs are queued", _ERROR),
                },
            },
        },
        "/evals/runs/{run_id}": {
            "get": {
                "operationId": "eval_runs_show",
                "summary": "one of your on-demand runs with every item's score and answer",
                "parameters": [
                    {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": _reply("the run", _EVAL_RUN),
                    **_ERRORS,
                    "404": _reply("not your run", _ERROR),
                },
            }
        },
        "/evals/runs/{run_id}/cancel": {
            "post": {
                "operationId": "eval_runs_cancel",
                "summary": "cancel one of your on-demand runs while it is queued or running: its "
                "job is cancelled, the run becomes `cancelled`, and your account is charged the "
                "GPU-hours the job ran, as for any cancelled job",
                "parameters": [
                    {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": _reply("the cancelled run", _EVAL_RUN),
                    **_ERRORS,
                    "404": _reply("not your run", _ERROR),
                    "409": _reply(
                        "the run has already finished (done, failed or cancelled)", _ERROR
                    ),
                    "502": _reply("the scheduler did not cancel the job; try again", _ERROR),
                },
            }
        },
        "/jobs/{job_id}/cancel": {
            "post": {
                "operationId": "jobs_cancel",
                "summary": "cancel one of your jobs",
                "parameters": [
                    {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": _reply("the job", _JOB),
                    **_ERRORS,
                    "404": _reply("not your job", _ERROR),
                    "409": _reply(
                        "the job runs one of your evaluation runs: cancel that run instead",
                        _ERROR,
                    ),
                },
            }
        },
    },
}
