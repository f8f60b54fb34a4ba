from django.urls import path

from frontend.consumers import BattleConsumer, LeaderboardConsumer
from frontend.live_consumers import AgentLiveConsumer, PublicLiveConsumer

websocket_urlpatterns = [
    path("ws/battles/<str:battle_id>/", BattleConsumer.as_asgi()),
    path("ws/leaderboard/", LeaderboardConsumer.as_asgi()),
    path("ws/organizer/agents/<slug:name>/live/", AgentLiveConsumer.as_asgi()),
    path("ws/live/agents/<slug:name>/", PublicLiveConsumer.as_asgi()),
]
