from django.urls import path

from frontend import views

urlpatterns = [
    path("", views.arena_page, name="arena"),
    path("api/prompts/suggest", views.suggest_prompt, name="suggest-prompt"),
    path("api/battles", views.start_battle, name="start-battle"),
    path("api/battles/<str:battle_id>/vote", views.vote, name="vote"),
]
