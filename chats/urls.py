"""Routes under ``/api/chats/`` (see ``chats.api``)."""

from __future__ import annotations

from django.urls import path

from chats import api

app_name = "chats"

urlpatterns = [
    path("", api.ChatListApi.as_view(), name="list"),
    path("keys/", api.UserKeysApi.as_view(), name="keys"),
    path("<str:chat_id>/", api.ChatDetailApi.as_view(), name="detail"),
    path("<str:chat_id>/messages/", api.ChatMessagesApi.as_view(), name="messages"),
    path(
        "<str:chat_id>/messages/<str:message_id>/",
        api.MessageStoreApi.as_view(),
        name="message-store",
    ),
    path("<str:chat_id>/embeds/", api.EmbedListApi.as_view(), name="embeds"),
    path("<str:chat_id>/embeds/<str:embed_id>/", api.EmbedStoreApi.as_view(), name="embed-store"),
]
