"""The admin shows an instance only to its owners and admins; secrets stay write-only."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse

from instances.models import ChannelConfig
from instances.services import channel_config_set, instance_member_set, instance_secret_set
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

SECRET_VALUE = "sk-admin-page-must-not-show-this"


def _staff(**kwargs):
    return UserFactory(is_staff=True, **kwargs)


def _changelist(client):
    return client.get(reverse("admin:instances_instance_changelist"))


def _change(client, instance):
    return client.get(reverse("admin:instances_instance_change", args=[instance.pk]))


def test_owner_sees_only_their_instance(client, instance, other_instance, owner):
    owner.is_staff = True
    owner.save()
    client.force_login(owner)

    listing = _changelist(client)

    assert listing.status_code == 200
    assert list(listing.context["cl"].result_list) == [instance]
    assert _change(client, instance).status_code == 200
    assert _change(client, other_instance).status_code == 302  # "doesn't exist" redirect


def test_instance_admin_role_can_edit(client, instance):
    admin_user = _staff()
    instance_member_set(instance=instance, user=admin_user, role="admin")
    client.force_login(admin_user)

    page = _change(client, instance)

    assert page.status_code == 200
    assert "prompt_sections-0-content" in page.content.decode()


def test_plain_member_cannot_see_the_instance(client, instance):
    member = _staff()
    instance_member_set(instance=instance, user=member, role="member")
    client.force_login(member)

    assert _changelist(client).status_code == 403
    assert _change(client, instance).status_code in (302, 403)
    index = client.get(reverse("admin:index")).content.decode()
    assert "instances/instance" not in index


def test_user_of_another_instance_cannot_see_it(client, instance, other_instance, stranger):
    stranger.is_staff = True
    stranger.save()
    client.force_login(stranger)

    listing = _changelist(client)

    assert list(listing.context["cl"].result_list) == [other_instance]
    assert "demo" not in [i.slug for i in listing.context["cl"].result_list]
    assert _change(client, instance).status_code == 302


def test_superuser_sees_every_instance(client, instance, other_instance):
    client.force_login(_staff(is_superuser=True))

    listing = _changelist(client)

    assert set(listing.context["cl"].result_list) == {instance, other_instance}


def test_secret_and_channel_credentials_are_masked_in_the_page(client, instance, owner):
    instance_secret_set(instance=instance, name="TAVILY_API_KEY", value=SECRET_VALUE)
    channel_config_set(
        instance=instance, kind="telegram", credentials={"bot_token": "tg-admin-secret"}
    )
    owner.is_staff = True
    owner.save()
    client.force_login(owner)

    html = _change(client, instance).content.decode()

    assert SECRET_VALUE not in html
    assert "tg-admin-secret" not in html
    assert re.search(r"set on \d{4}-\d{2}-\d{2}", html)
    assert 'name="secrets-0-value"' in html
    assert "missing secret: OPENWEATHERMAP_API_KEY" in html  # computed tools, read-only
    assert ChannelConfig.objects.get(instance=instance).credentials_sealed is not None


def test_computed_tools_and_catalog_are_read_only_for_instance_admins(client, instance, owner):
    owner.is_staff = True
    owner.save()
    client.force_login(owner)

    tools = client.get(reverse("admin:skills_tool_changelist"))
    skill_add = client.get(reverse("admin:skills_skill_add"))

    assert tools.status_code == 200
    assert "calculator" in tools.content.decode()
    assert skill_add.status_code == 403


# --- members: added by exact username, never picked from a list of accounts ----------------


def _staff_owner(client, owner):
    owner.is_staff = True
    owner.save()
    client.force_login(owner)


def _unchanged_page_data(page) -> dict[str, Any]:
    """The change page's forms as a browser submits them untouched (disabled fields omitted)."""
    forms = [page.context["adminform"].form]
    for inline in page.context["inline_admin_formsets"]:
        forms += [inline.formset.management_form, *inline.formset.forms]
    data: dict[str, Any] = {}
    for form in forms:
        for bound in form:
            value = bound.value()
            if bound.field.disabled or value is None or value is False:
                continue
            data[bound.html_name] = "on" if value is True else value
    return data


def _post_new_member(client, instance, row: dict[str, str]):
    """Submit the instance page with one more members row (``row``: field name -> value)."""
    data = _unchanged_page_data(_change(client, instance))
    index = int(data["members-TOTAL_FORMS"])
    data["members-TOTAL_FORMS"] = str(index + 1)
    data.update({f"members-{index}-{name}": value for name, value in row.items()})
    return client.post(reverse("admin:instances_instance_change", args=[instance.pk]), data)


def test_an_owners_page_names_her_members_and_no_other_account(client, instance, owner):
    member = UserFactory(username="mia-member")
    instance_member_set(instance=instance, user=member, role="member")
    UserFactory(username="olaf-outsider")
    _staff_owner(client, owner)

    html = _change(client, instance).content.decode()

    assert 'value="mia-member"' in html
    assert 'value="owner"' in html
    assert "olaf-outsider" not in html
    assert 'name="members-0-user"' not in html  # no raw id, select or autocomplete of users
    assert "/admin/auth/user/" not in html
    assert re.search(r'<input[^>]*name="members-0-username"[^>]*disabled', html)
    new_row = re.search(r'<input[^>]*name="members-__prefix__-username"[^>]*>', html)
    assert new_row is not None
    assert 'autocomplete="off"' in new_row.group(0)


def test_an_owner_adds_a_member_by_exact_username(client, instance, owner):
    newcomer = UserFactory(username="nora")
    _staff_owner(client, owner)

    saved = _post_new_member(client, instance, {"username": "nora", "role": "member"})

    assert saved.status_code == 302
    assert instance.members.get(user=newcomer).role == "member"
    assert 'value="nora"' in _change(client, instance).content.decode()


@pytest.mark.parametrize("username", ["nobody-here", "Nora", "sleeper"])
def test_an_unknown_or_inactive_username_is_no_such_user(client, instance, owner, username):
    UserFactory(username="nora")
    UserFactory(username="sleeper", is_active=False)
    _staff_owner(client, owner)

    refused = _post_new_member(client, instance, {"username": username, "role": "member"})

    assert refused.status_code == 200
    html = refused.content.decode()
    assert "No such user." in html
    assert "sleeper" not in html.replace(f'value="{username}"', "")
    assert list(instance.members.values_list("user__username", flat=True)) == ["owner"]


def test_a_user_id_in_the_members_row_adds_nobody(client, instance, owner):
    # The attack: post ids one by one and read back the name the page shows for each.
    outsider: Any = UserFactory(username="olaf-outsider")
    _staff_owner(client, owner)

    refused = _post_new_member(client, instance, {"user": str(outsider.pk), "role": "admin"})

    assert refused.status_code == 200
    assert "This field is required." in refused.content.decode()
    assert not instance.members.filter(user=outsider).exists()
    assert "olaf-outsider" not in _change(client, instance).content.decode()


def test_an_existing_member_cannot_be_added_twice(client, instance, owner):
    _staff_owner(client, owner)

    refused = _post_new_member(client, instance, {"username": "owner", "role": "admin"})

    assert refused.status_code == 200
    assert "Already a member of this instance." in refused.content.decode()
    assert list(instance.members.values_list("role", flat=True)) == ["owner"]
