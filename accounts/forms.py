"""Forms of the account pages; they validate input, services do the writes."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.forms import UsernameField
from django.contrib.auth.models import AbstractBaseUser


class SignUpForm(forms.Form):
    """Username, e-mail and password twice; the invitation token travels hidden."""

    username = UsernameField(max_length=150, widget=forms.TextInput(attrs={"autofocus": True}))
    email = forms.EmailField(max_length=254)
    password1 = forms.CharField(
        label="Password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text=password_validation.password_validators_help_text_html(),
    )
    password2 = forms.CharField(
        label="Password again",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )
    invite = forms.CharField(required=False, widget=forms.HiddenInput)

    def clean_username(self) -> str:
        username: str = self.cleaned_data["username"]
        if get_user_model().objects.filter(username__iexact=username).exists():
            raise forms.ValidationError("This username is taken.")
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
    """The account password, to confirm a destructive action or compare with a passphrase."""

    password = forms.CharField(
        strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "current-password"})
    )

    def __init__(self, *args: Any, user: AbstractBaseUser, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_password(self) -> str:
        password: str = self.cleaned_data["password"]
        if not self.user.check_password(password):
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
