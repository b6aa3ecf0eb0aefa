"""Account pages: sign-up, sign-in, sign-out, password change, deletion, API tokens; the
app shell.

Views validate through forms and call ``accounts.services``; throttling of failed
sign-ins is django-axes' job (its backend and middleware).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from django.conf import settings
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
from django.utils.crypto import salted_hmac
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
from accounts.selectors import (
    api_token_get_for_user,
    api_tokens_for_user,
    invitation_problem,
    signup_open,
    signup_target_get,
)
from instances.models import Instance, InstanceMember
from openmates import ids, llm
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
        "instances": [_instance_config(m) for m in memberships],
        "modelLabels": _model_labels([m.instance for m in memberships]),
        "sessionTag": _session_tag(request),
        "fileLimits": _file_limits(),
    }
    return render(request, "app/app.html", {"app_config": config})


def _file_limits() -> dict[str, int]:
    # The limits pipeline.protocol applies to a message's files (docs/protocol.md §13),
    # so the composer refuses a file with the reason before sending it.
    return {
        "maxFileBytes": max(1, min(int(settings.PIPELINE_MAX_FILE_BYTES), ids.MAX_FILE_BYTES)),
        "maxFilesBytes": max(1, min(int(settings.PIPELINE_MAX_FILES_BYTES), ids.MAX_FILES_BYTES)),
        "maxFiles": max(0, min(int(settings.PIPELINE_MAX_FILES), 8)),
    }


def _session_tag(request: HttpRequest) -> str:
    # A key remembered on the device is bound to the session it was stored in
    # (docs/crypto.md §2): a new session (sign-in again, a password change) has a new tag.
    # 32 hex characters of an HMAC under SECRET_KEY, so the tag does not reveal the key.
    session_key = request.session.session_key or ""
    return salted_hmac("openmates.accounts.device", session_key).hexdigest()[:32]


def _instance_config(membership: InstanceMember) -> dict[str, Any]:
    # What the chat screen shows of an instance's answering model: its readable name,
    # whether it can use tools (the bundled base model cannot: docs/architecture.md §6),
    # and the tiers the composer's picker offers: those the member's role may ask for that
    # have a model.
    instance = membership.instance
    model = llm.tier_model(tier="standard", instance=instance)
    tiers = [
        (tier, llm.tier_model(tier=tier, instance=instance)) for tier in membership.allowed_tiers
    ]
    return {
        "slug": instance.slug,
        "name": instance.name,
        "model": model,
        "modelLabel": llm.model_label(model),
        "toolsAvailable": not llm.is_base_model(tier="standard", instance=instance),
        "tiers": [{"tier": t, "modelLabel": llm.model_label(m)} for t, m in tiers if m],
    }


def _model_labels(instances: list[Instance]) -> dict[str, str]:
    # Every model id a reply's ``model`` may name (default tiers and the instances' maps).
    tier_maps = [settings.LLM_DEFAULT_TIERS, *(i.tier_map or {} for i in instances)]
    ids = {
        str(entry.get("model", ""))
        for tier_map in tier_maps
        for entries in tier_map.values()
        for entry in entries or ()
        if isinstance(entry, dict)
    }
    return {model: llm.model_label(model) for model in sorted(ids) if model}


def sign_up(request: HttpRequest) -> HttpResponse:
    """Create an account (open sign-up or with ``?invite=<token>``) and sign it in.

    A token that cannot be used says why (``invitation_problem``: used, expired, unknown);
    an invitation-only server without a usable token says how to get one. A signed-in
    user gets no form and no sign-in link (the link would only bounce back): the page
    says whose session it is and links back to the app, and a POST creates nothing.
    """
    token = request.POST.get("invite") or request.GET.get("invite", "")
    target = signup_target_get(invitation_token=token)
    problem = invitation_problem(token=token)
    form = SignUpForm(request.POST or None, initial={"invite": token})
    signed_in = request.user.is_authenticated
    if (
        request.method == "POST"
        and not signed_in
        and target.instance is not None
        and form.is_valid()
    ):
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
    context = {
        "form": form,
        "closed": target.instance is None,
        "instance": target.instance,
        "invitation_problem": problem,
    }
    return render(request, "accounts/signup.html", context, status=200)


class SignInView(LoginView):
    """Django's sign-in; axes counts failures and locks out after too many."""

    template_name = "accounts/login.html"
    authentication_form = SignInForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        # An invitation-only server says so instead of linking to a closed sign-up page.
        return {**super().get_context_data(**kwargs), "signup_open": signup_open()}


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
    # The confirmation shows on this page, where the change was made.
    success_url = reverse_lazy("accounts:password_change")
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
    return render(request, "accounts/deleted.html", {"signup_open": signup_open()})


# The session key under which a new token waits for the page the POST redirects to.
_CREATED_TOKEN_KEY = "accounts.api_token_created"  # noqa: S105 (a key name, no secret)


@login_required
@never_cache
def api_tokens(request: HttpRequest) -> HttpResponse:
    """The user's API tokens; POST creates one (after the password) and redirects here.

    The new token waits in the session (``_CREATED_TOKEN_KEY``) for the page the POST
    redirects to, which shows it once and removes it: reloading shows the list, never
    creates a second token. Past the hourly creation limit the page answers 429 with
    ``Retry-After``.
    """
    user = cast("User", request.user)
    form = ApiTokenCreateForm(request.POST or None, user=user, request=request)
    status, retry_after = 200, None
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
            request.session[_CREATED_TOKEN_KEY] = created
            return redirect("accounts:api_tokens")
    context = {
        "form": form,
        "created": request.session.pop(_CREATED_TOKEN_KEY, "") if request.method == "GET" else "",
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
