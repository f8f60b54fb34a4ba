from django.urls import path

from arena.phases import api

urlpatterns = [
    path("api/v1/votes", api.votes, name="api-votes"),
    path("api/v1/leaderboard", api.leaderboard, name="api-leaderboard"),
]
