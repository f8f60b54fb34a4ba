from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("agents.urls")),
    path("", include("arena.phases.urls")),
    path("", include("evalsuite.urls")),
    path("", include("frontend.urls")),
]

# An outage of the database raised by a middleware answers 503 "try again", not a bare 500.
handler500 = "arena.outage.server_error"
