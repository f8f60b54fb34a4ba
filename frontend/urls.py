from django.urls import path

from frontend import (
    kiosk_views,
    leaderboard_views,
    live_views,
    organizer_views,
    organizer_voters,
    views,
)

urlpatterns = [
    path("", views.arena_page, name="arena"),
    path("api/prompts/suggest", views.suggest_prompt, name="suggest-prompt"),
    path("api/battles", views.start_battle, name="start-battle"),
    path("api/battles/<str:battle_id>/turns", views.follow_up, name="follow-up"),
    path("api/battles/<str:battle_id>/vote", views.vote, name="vote"),
    path("kiosk", kiosk_views.kiosk_page, name="kiosk"),
    path("kiosk/next-voter", kiosk_views.kiosk_next_voter, name="kiosk-next-voter"),
    path("kiosk/enrol/<str:token>", kiosk_views.kiosk_enrolment, name="kiosk-enrol"),
    path("kiosk/qr.svg", kiosk_views.kiosk_qr, name="kiosk-qr"),
    path("leaderboard/", leaderboard_views.leaderboard_page, name="leaderboard"),
    path("leaderboard/live", leaderboard_views.live_leaderboard_page, name="leaderboard-live"),
    path(
        "leaderboard/intervals.svg", leaderboard_views.interval_plot, name="leaderboard-intervals"
    ),
    path(
        "leaderboard/winrates.svg", leaderboard_views.winrate_heatmap, name="leaderboard-winrates"
    ),
    path("api/leaderboard", leaderboard_views.leaderboard_json, name="leaderboard-json"),
    path("organizer/", organizer_views.phases, name="organizer"),
    path("organizer/agents/", organizer_views.agents, name="organizer-agents"),
    path("organizer/agents/<slug:name>/", organizer_views.agent, name="organizer-agent"),
    path("organizer/cluster/", organizer_views.cluster, name="organizer-cluster"),
    path("organizer/evaluation/", organizer_views.evaluation, name="organizer-evaluation"),
    path("organizer/audit/", organizer_views.audit, name="organizer-audit"),
    path("organizer/voters/", organizer_voters.voters_page, name="organizer-voters"),
    path("organizer/agents/<slug:name>/live", live_views.agent_live, name="organizer-agent-live"),
    path(
        "organizer/agents/<slug:name>/live/events",
        live_views.agent_live_events,
        name="organizer-agent-live-events",
    ),
    path("live/agents/<slug:name>", live_views.public_live, name="public-agent-live"),
    path(
        "live/agents/<slug:name>/events",
        live_views.public_live_events,
        name="public-agent-live-events",
    ),
]
