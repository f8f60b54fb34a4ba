from django.urls import path

from evalsuite import api

urlpatterns = [
    path("api/v1/evals", api.evals, name="api-evals"),
]
