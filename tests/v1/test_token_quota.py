"""/v1's tokens per UTC day end to end (docs/api.md §5): the model's reported usage uses
up an instance key's or a user's quota, and the next request — in another process — is
429 ``tokens_per_day`` with ``Retry-After`` the seconds to UTC midnight.

Two real Daphne processes on the test session's PostgreSQL, Redis and OpenBao, their
models played by one loopback server (each main answer reports 10 prompt tokens and one
completion token per piece), so the count the second process refuses on was written by
the first: the counters live in Redis, not in a process.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import openai
import pytest

from accounts.instance_keys import instance_key_create
from accounts.models import InstanceApiKey
from accounts.services import api_token_create
from chats.models import Chat
from instances.models import Instance
from instances.services import instance_create
from openai_api import quotas
from tests.ui.conftest import daphne_serving
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

HELLO: Any = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def servers(
    django_db_setup: Any, v1_llm: UIModelServer, tmp_path_factory: Any
) -> Iterator[tuple[str, str]]:
    """The base URLs of two Daphne processes serving the app."""
    env = {"OPENAI_API_KEY": "sk-v1-test", "V1_REQUESTS_PER_MINUTE": "1000"}
    for tier in ("FAST", "STANDARD", "HEAVY"):
        env[f"LLM_{tier}_MODEL"] = "openai/wire-model"
        env[f"LLM_{tier}_API_BASE"] = v1_llm.api_base
    with (
        daphne_serving(env, tmp_path_factory.mktemp("daphne-a")) as base_a,
        daphne_serving(env, tmp_path_factory.mktemp("daphne-b")) as base_b,
    ):
        yield base_a, base_b


@pytest.fixture
def small_quota(owner: Any, skill_catalog: None) -> Instance:
    """An instance ``live`` whose keys and users may use 12 tokens a day."""
    instance: Instance = instance_create(slug="live", name="Live", owner=owner)
    Instance.objects.filter(pk=instance.pk).update(api_tokens_per_day=12)
    return instance


def _client(base: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=30)


def _seconds_to_midnight() -> float:
    now = datetime.now(tz=UTC)
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (midnight - now).total_seconds()


@pytest.fixture(autouse=True)
def _one_utc_day() -> None:
    """The requests of a test fall in one UTC day (the counters are per day)."""
    if _seconds_to_midnight() < 60:
        time.sleep(_seconds_to_midnight() + 1)


def _refused(base: str, credential: str) -> openai.RateLimitError:
    with pytest.raises(openai.RateLimitError) as refused:
        _client(base, credential).chat.completions.create(model="live", messages=HELLO)
    return refused.value


def test_an_instance_keys_tokens_per_day_run_out_across_processes(
    servers: tuple[str, str], model_server: UIModelServer, small_quota: Instance
) -> None:
    base_a, base_b = servers
    first, second = (instance_key_create(instance=small_quota, name=n)[1] for n in "ab")
    prefixes = {k.name: k.prefix for k in InstanceApiKey.objects.filter(instance=small_quota)}
    model_server.queue(Turn(pieces=["Hi", " there", "."], gap_s=0), Turn(pieces=["Yes."], gap_s=0))

    answer = _client(base_a, first).chat.completions.create(model="live", messages=HELLO)
    counted = quotas.tokens_today(instance_id=small_quota.pk)
    refused = _refused(base_b, first)
    expected_retry = _seconds_to_midnight()
    other_key = _client(base_b, second).chat.completions.create(model="live", messages=HELLO)

    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (10, 3)
    assert counted == {f"key:{prefixes['a']}": 13}  # the model's usage, not an estimate
    retry_after = refused.response.headers["Retry-After"]
    assert retry_after.isdigit()
    assert 0 < int(retry_after) <= 86_401
    assert abs(int(retry_after) - expected_retry) <= 5
    assert refused.status_code == 429
    assert refused.code == "tokens_per_day"
    assert refused.type == "rate_limit_error"
    assert refused.body == {
        "message": f"Over the tokens per day limit; retry in {retry_after} s.",
        "type": "rate_limit_error",
        "param": None,
        "code": "tokens_per_day",
    }
    # Counted per key: the instance's other key still has its whole quota.
    assert other_key.choices[0].message.content == "Yes."
    key_users = {k.name: k.user_id for k in InstanceApiKey.objects.filter(instance=small_quota)}
    assert Chat.objects.filter(owner_id=key_users["a"]).count() == 1  # nothing made for the 429
    assert quotas.tokens_today(instance_id=small_quota.pk) == {
        f"key:{prefixes['a']}": 13,
        f"key:{prefixes['b']}": 11,
    }


def test_a_users_tokens_per_day_are_counted_per_user_across_their_tokens(
    servers: tuple[str, str], model_server: UIModelServer, small_quota: Instance, owner: Any
) -> None:
    base_a, base_b = servers
    _, token = api_token_create(user=owner, name="laptop")
    _, other_token = api_token_create(user=owner, name="server")
    key = instance_key_create(instance=small_quota, name="script")[1]
    model_server.queue(Turn(pieces=["One", " two", " three."], gap_s=0))

    streamed = list(
        _client(base_a, token).chat.completions.create(
            model="live",
            messages=HELLO,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    refused = _refused(base_b, other_token)
    expected_retry = _seconds_to_midnight()
    by_key = _client(base_b, key).chat.completions.create(model="live", messages=HELLO)

    usage = streamed[-1].usage
    assert usage is not None
    assert usage.total_tokens == 13
    assert quotas.tokens_today(instance_id=small_quota.pk)[f"user:{owner.pk}"] == 13
    assert refused.code == "tokens_per_day"
    assert abs(int(refused.response.headers["Retry-After"]) - expected_retry) <= 5
    assert by_key.choices[0].message.content == "Hello from the test model."
    assert Chat.objects.filter(owner=owner).count() == 1
