from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("agents.urls")),
    path("", include("arena.phases.urls")),
    path("", include("evalsuite.urls")),
    path("", include("frontend.urls")),
]
