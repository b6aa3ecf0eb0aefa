"""Account routes, mounted under ``/accounts/``."""

from __future__ import annotations

from django.urls import path

from accounts import views

app_name = "accounts"

urlpatterns = [
    path("signup/", views.sign_up, name="signup"),
    path("login/", views.SignInView.as_view(), name="login"),
    path("logout/", views.sign_out, name="logout"),
    path("password/", views.PasswordChange.as_view(), name="password_change"),
    path("password/verify/", views.password_verify, name="password_verify"),
    path("delete/", views.account_delete, name="delete"),
    path("deleted/", views.account_deleted, name="deleted"),
    path("tokens/", views.api_tokens, name="api_tokens"),
    path("tokens/<str:prefix>/revoke/", views.api_token_revoke, name="api_token_revoke"),
]
