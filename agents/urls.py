from django.urls import path

from agents import api, proxy

urlpatterns = [
    path("proxy/v1/chat/completions", proxy.chat_completions, name="proxy-chat-completions"),
    path("proxy/v1/models", proxy.models, name="proxy-models"),
    path("api/v1/openapi.json", api.openapi, name="api-openapi"),
    path("api/v1/budget", api.budget, name="api-budget"),
    path("api/v1/jobs", api.jobs, name="api-jobs"),
    path("api/v1/jobs/<str:job_id>", api.job_detail, name="api-job"),
    path("api/v1/jobs/<str:job_id>/cancel", api.job_cancel_view, name="api-job-cancel"),
    path("api/v1/data", api.data, name="api-data"),
    path("api/v1/checkpoints", api.checkpoints, name="api-checkpoints"),
    path("api/v1/nomination", api.nomination, name="api-nomination"),
    path("api/v1/journal", api.journal, name="api-journal"),
    path("api/v1/trajectory/events", api.trajectory_events, name="api-trajectory-events"),
]
