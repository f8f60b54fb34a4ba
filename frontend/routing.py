from django.urls import path

from frontend.consumers import BattleConsumer, LeaderboardConsumer

websocket_urlpatterns = [
    path("ws/battles/<str:battle_id>/", BattleConsumer.as_asgi()),
    path("ws/leaderboard/", LeaderboardConsumer.as_asgi()),
]
