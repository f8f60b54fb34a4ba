from django.urls import path

from frontend.consumers import BattleConsumer

websocket_urlpatterns = [
    path("ws/battles/<str:battle_id>/", BattleConsumer.as_asgi()),
]
