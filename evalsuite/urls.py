from django.urls import path

from evalsuite import api

urlpatterns = [
    path("api/v1/evals", api.evals, name="api-evals"),
    path("api/v1/evals/runs", api.eval_runs, name="api-eval-runs"),
    path("api/v1/evals/runs/<str:run_id>", api.eval_run, name="api-eval-run"),
    path("api/v1/evals/runs/<str:run_id>/cancel", api.eval_run_cancel, name="api-eval-run-cancel"),
]
