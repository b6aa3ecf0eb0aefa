"""Forms of the account pages; they validate input, services do the writes."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import authenticate, get_user_model, password_validation
from django.contrib.auth.forms import AuthenticationForm, PasswordChangeForm, UsernameField
from django.contrib.auth.models import AbstractBaseUser, User
from django.core.validators import MaxLengthValidator
from django.http import HttpRequest

from accounts.usernames import username_validate

# Longest password accepted at sign-up (hashing a megabyte-long one is a cheap DoS).
PASSWORD_MAX_LENGTH = 1024
PASSWORD_TOO_LONG = f"Use at most {PASSWORD_MAX_LENGTH} characters for the password."


def _username_field() -> Any:
    return get_user_model()._meta.get_field(get_user_model().USERNAME_FIELD)


class SignInForm(AuthenticationForm):
    """Django's sign-in form, refusing a username longer than the model's as a form error.

    Django sets the field's ``max_length`` after construction, which adds no validator;
    without one an overlong name reached ``authenticate()`` (and django-axes).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["username"].validators.append(
            MaxLengthValidator(_username_field().max_length or 150)
        )


class SignUpForm(forms.Form):
    """Username, e-mail and password twice; the invitation token travels hidden.

    The username passes the user model's own validators (characters, length) after
    Django's NFKC normalisation, must differ from every existing username in more
    than case, and may neither mix scripts nor read like an existing username
    (``accounts.usernames``). Passwords are at most ``PASSWORD_MAX_LENGTH`` characters.
    """

    username = UsernameField(
        max_length=150,
        widget=forms.TextInput(attrs={"autofocus": True}),
        help_text="Letters, digits and @ . + - _ only; at most 150 characters.",
    )
    email = forms.EmailField(
        max_length=254,
        required=False,
        help_text="Optional, unless your invitation was made for an address.",
    )
    password1 = forms.CharField(
        label="Password",
        strip=False,
        max_length=PASSWORD_MAX_LENGTH,
        error_messages={"max_length": PASSWORD_TOO_LONG},
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text=password_validation.password_validators_help_text_html(),
    )
    password2 = forms.CharField(
        label="Password again",
        strip=False,
        max_length=PASSWORD_MAX_LENGTH,
        error_messages={"max_length": PASSWORD_TOO_LONG},
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )
    invite = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["username"]
        field.validators.extend(
            v for v in _username_field().validators if v not in field.validators
        )

    def clean_username(self) -> str:
        # UsernameField already applied NFKC; iexact compares case-insensitively.
        username: str = self.cleaned_data["username"]
        if get_user_model().objects.filter(username__iexact=username).exists():
            raise forms.ValidationError("This username is taken.")
        username_validate(username)
        return username

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        first, second = cleaned.get("password1"), cleaned.get("password2")
        if first and second and first != second:
            self.add_error("password2", "The two passwords differ.")
        elif first:
            candidate = get_user_model()(
                username=cleaned.get("username", ""), email=cleaned.get("email", "")
            )
            try:
                password_validation.validate_password(first, candidate)
            except forms.ValidationError as error:
                self.add_error("password1", error)
        return cleaned


class PasswordConfirmForm(forms.Form):
    """The account password, to confirm a destructive action or compare with a passphrase.

    Checked through ``authenticate()`` with the request, so django-axes counts a wrong
    password like a failed sign-in and, after ``AXES_FAILURE_LIMIT``, its middleware
    answers with the lockout page (429) instead: the form is no unthrottled oracle.
    """

    password = forms.CharField(
        strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "current-password"})
    )

    def __init__(
        self, *args: Any, user: AbstractBaseUser, request: HttpRequest, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        self.request = request

    def clean_password(self) -> str:
        password: str = self.cleaned_data["password"]
        checked = authenticate(self.request, username=self.user.get_username(), password=password)
        if checked is None or checked.pk != self.user.pk:
            raise forms.ValidationError("That is not your password.")
        return password


class AccountDeleteForm(PasswordConfirmForm):
    """Deleting an account needs the password and the word DELETE typed out."""

    confirm = forms.CharField(
        label='Type "DELETE" to confirm', widget=forms.TextInput(attrs={"autocomplete": "off"})
    )

    def clean_confirm(self) -> str:
        confirm: str = self.cleaned_data["confirm"]
        if confirm.strip() != "DELETE":
            raise forms.ValidationError('Type "DELETE" in capitals to confirm.')
        return confirm


class ApiTokenCreateForm(PasswordConfirmForm):
    """A new API token's name, optional lifetime in days (1 to 3,650; empty: no expiry) and
    the account password.

    The password (checked as in :class:`PasswordConfirmForm`) keeps a session left open,
    or stolen, from minting tokens that would outlive it.
    """

    name = forms.CharField(max_length=100, label="Name", help_text="")
    expires_days = forms.IntegerField(
        required=False, min_value=1, max_value=3650, label="Expires after (days, optional)"
    )
    field_order = ("name", "expires_days", "password")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["password"].label = "Your password"


class ThrottledPasswordChangeForm(PasswordChangeForm):
    """Django's password change, its old-password check throttled by django-axes.

    The old password goes through ``authenticate()`` with the request, as in
    :class:`PasswordConfirmForm`, so guessing it locks out like failed sign-ins.
    """

    def __init__(self, user: User, *args: Any, request: HttpRequest, **kwargs: Any) -> None:
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self) -> str:
        old_password: str = self.cleaned_data["old_password"]
        checked = authenticate(
            self.request, username=self.user.get_username(), password=old_password
        )
        if checked is None or checked.pk != self.user.pk:
            raise forms.ValidationError(
                self.error_messages["password_incorrect"], code="password_incorrect"
            )
        return old_password
