from django.urls import path

from agents import proxy

urlpatterns = [
    path("proxy/v1/chat/completions", proxy.chat_completions, name="proxy-chat-completions"),
    path("proxy/v1/responses", proxy.responses, name="proxy-responses"),
    path("proxy/v1/embeddings", proxy.embeddings, name="proxy-embeddings"),
    path("proxy/v1/messages", proxy.messages, name="proxy-messages"),
    path("proxy/v1/models", proxy.models, name="proxy-models"),
]
