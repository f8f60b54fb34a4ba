from django.apps import AppConfig


class AgentRunsConfig(AppConfig):
    name = "agents.runs"
    label = "agent_runs"
    verbose_name = "Agent runs (each agent's scaffold, supervised under limits)"
