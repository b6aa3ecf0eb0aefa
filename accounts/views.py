"""Account pages: sign-up, sign-in, sign-out, password change, deletion, API tokens; the
app shell.

Views validate through forms and call ``accounts.services``; throttling of failed
sign-ins is django-axes' job (its backend and middleware).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from django.contrib import messages
from django.contrib.auth import authenticate, login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.contrib.auth.views import LoginView, PasswordChangeView
from django.forms import Form
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts import services
from accounts.forms import (
    AccountDeleteForm,
    ApiTokenCreateForm,
    SignInForm,
    SignUpForm,
    ThrottledPasswordChangeForm,
)
from accounts.selectors import api_token_get_for_user, api_tokens_for_user, signup_target_get
from instances.models import InstanceMember
from openmates.vault import VaultError


def app_shell(request: HttpRequest) -> HttpResponse:
    """The chat app for a signed-in user; everyone else goes to sign-in."""
    if not request.user.is_authenticated:
        return redirect("accounts:login")
    memberships = (
        InstanceMember.objects.filter(user=request.user)
        .select_related("instance")
        .order_by("instance__name")
    )
    config = {
        "userId": str(request.user.pk),
        "username": request.user.get_username(),
        "instances": [{"slug": m.instance.slug, "name": m.instance.name} for m in memberships],
    }
    return render(request, "app/app.html", {"app_config": config})


def sign_up(request: HttpRequest) -> HttpResponse:
    """Create an account (open sign-up or with ``?invite=<token>``) and sign it in."""
    token = request.POST.get("invite") or request.GET.get("invite", "")
    target = signup_target_get(invitation_token=token)
    form = SignUpForm(request.POST or None, initial={"invite": token})
    if request.method == "POST" and target.instance is not None and form.is_valid():
        try:
            user = services.user_sign_up(
                username=form.cleaned_data["username"],
                email=form.cleaned_data["email"],
                password=form.cleaned_data["password1"],
                invitation_token=form.cleaned_data["invite"],
            )
        except services.SignupRefusedError as refused:
            form.add_error(None, str(refused))
        except VaultError:
            form.add_error(None, "The key service is unavailable; try again in a moment.")
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            return redirect("home")
    context = {"form": form, "closed": target.instance is None, "instance": target.instance}
    return render(request, "accounts/signup.html", context, status=200)


class SignInView(LoginView):
    """Django's sign-in; axes counts failures and locks out after too many."""

    template_name = "accounts/login.html"
    authentication_form = SignInForm
    redirect_authenticated_user = True


@require_POST
def sign_out(request: HttpRequest) -> HttpResponse:
    """End the session and close the user's sockets (4401)."""
    services.user_sign_out(request=request)
    return redirect("accounts:login")


class PasswordChange(PasswordChangeView):
    """Change the login password (the old one checked as a throttled sign-in); the user's
    other sessions end, and the user model's ``post_save`` receiver
    (``accounts.signals.user_saved``) revokes their API tokens and closes their sockets."""

    template_name = "accounts/password_change.html"
    success_url = reverse_lazy("home")
    form_class = ThrottledPasswordChangeForm

    def get_form_kwargs(self) -> dict[str, Any]:
        return {**super().get_form_kwargs(), "request": self.request}

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        messages.success(self.request, "Your password was changed; your API tokens are revoked.")
        return response


@login_required
@require_POST
def password_verify(request: HttpRequest) -> JsonResponse:
    """Whether ``password`` is the login password (throttled by axes like a sign-in).

    The encryption set-up page uses it so the browser can refuse a passphrase equal to
    the login password without ever storing that password.
    """
    user = authenticate(
        request, username=request.user.get_username(), password=request.POST.get("password", "")
    )
    return JsonResponse({"ok": user is not None and user.pk == request.user.pk})


@login_required
def account_delete(request: HttpRequest) -> HttpResponse:
    """Delete the account after the password (throttled by axes like a sign-in) and a typed
    confirmation."""
    user = cast("User", request.user)
    form: Form = AccountDeleteForm(request.POST or None, user=user, request=request)
    if request.method == "POST" and form.is_valid():
        try:
            services.account_delete(user=user)
        except VaultError:
            form.add_error(None, "The key service is unavailable; nothing was deleted. Try again.")
        else:
            services.user_sign_out(request=request)
            return redirect("accounts:deleted")
    return render(request, "accounts/delete.html", {"form": form})


def account_deleted(request: HttpRequest) -> HttpResponse:
    """Shown after an account was deleted."""
    return render(request, "accounts/deleted.html")


@login_required
@never_cache
def api_tokens(request: HttpRequest) -> HttpResponse:
    """The user's API tokens; POST creates one (after the password) and shows it in this
    answer only.

    No redirect after the POST: the token would have to wait in the session or a cookie.
    Past the hourly creation limit the page answers 429 with ``Retry-After``.
    """
    user = cast("User", request.user)
    form = ApiTokenCreateForm(request.POST or None, user=user, request=request)
    created, status, retry_after = "", 200, None
    if request.method == "POST" and form.is_valid():
        days = form.cleaned_data["expires_days"]
        expires_at = timezone.now() + timedelta(days=days) if days else None
        try:
            _, created = services.api_token_create(
                user=user, name=form.cleaned_data["name"], expires_at=expires_at
            )
        except services.ApiTokenInvalidError as refused:
            form.add_error(None, str(refused))
        except services.ApiTokenLimitError as refused:
            form.add_error(None, str(refused))
            retry_after = refused.retry_after
            status = 200 if retry_after is None else 429
        else:
            form = ApiTokenCreateForm(user=user, request=request)
    context = {
        "form": form,
        "created": created,
        "tokens": api_tokens_for_user(user=user),
        "per_hour": services.API_TOKEN_CREATE_PER_HOUR,
        "active_max": services.API_TOKEN_ACTIVE_MAX,
    }
    response = render(request, "accounts/api_tokens.html", context, status=status)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


@login_required
@require_POST
def api_token_revoke(request: HttpRequest, prefix: str) -> HttpResponse:
    """Revoke one of the user's tokens (404 for anyone else's); its sockets close."""
    token = api_token_get_for_user(user=cast("User", request.user), prefix=prefix)
    if token is None:
        raise Http404("no such token")
    services.api_token_revoke(token=token)
    messages.success(request, f"Revoked the API token “{token.name}”.")
    return redirect("accounts:api_tokens")
