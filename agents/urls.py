from django.urls import path

from agents import proxy

urlpatterns = [
    path("proxy/v1/chat/completions", proxy.chat_completions, name="proxy-chat-completions"),
    path("proxy/v1/models", proxy.models, name="proxy-models"),
]
