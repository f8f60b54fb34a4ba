from django.contrib import admin
from django.urls import include, path

from arena import api_v1

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api_v1.urls),
    path("", include("agents.urls")),
    path("", include("frontend.urls")),
]

# An outage of the database raised by a middleware answers 503 "try again", not a bare 500.
handler500 = "arena.outage.server_error"
