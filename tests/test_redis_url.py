"""Redis URL forms: one server, a cluster, a Sentinel-managed primary; others refused."""

from __future__ import annotations

import pytest
from redis import exceptions as rex
from redis.sentinel import MasterNotFoundError

import amber
from amber.config import load_settings
from amber.engines.retry import Policy, sha1
from amber.errors import ConfigError
from amber.memory import scripts, write_scripts
from amber.redis_url import parse_redis_url


def test_single_server_forms_pass_through() -> None:
    for url in ("redis://127.0.0.1:6379/0", "rediss://h:1", "unix:///tmp/r.sock?db=2"):
        target = parse_redis_url(url)
        assert (target.kind, target.url) == ("single", url)


def test_cluster_form_lists_seed_nodes_and_credentials() -> None:
    target = parse_redis_url("redis+cluster://u:p%40ss@127.0.0.1:7000,127.0.0.1:7001")
    assert target.kind == "cluster"
    assert target.nodes == (("127.0.0.1", 7000), ("127.0.0.1", 7001))
    assert (target.username, target.password, target.tls) == ("u", "p@ss", False)
    assert parse_redis_url("rediss+cluster://h:1").tls


def test_sentinel_form_names_service_and_db() -> None:
    target = parse_redis_url("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster/3")
    assert target.kind == "sentinel"
    assert target.nodes == (("127.0.0.1", 26379), ("127.0.0.1", 26380))
    assert (target.service, target.db) == ("mymaster", 3)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:7000?cluster=true",
        "redis+cluster://127.0.0.1",
        "redis+cluster://127.0.0.1:7000/1",
        "redis+cluster://127.0.0.1:7000?x=1",
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://127.0.0.1:26379/m/x",
        "memcached://127.0.0.1:1",
        "127.0.0.1:6379",
    ],
)
def test_wrong_forms_are_config_errors_saying_what_is_accepted(url: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(redis_url=url)
    assert err.value.context["setting"] == "redis_url"
    assert "redis+cluster://host:port" in err.value.message
    with pytest.raises(amber.AmberError):
        amber.connect(url, "postgresql://127.0.0.1:1/x")


def test_retry_policy_sends_again_only_what_cannot_apply_twice() -> None:
    policy = Policy(1.0)
    assert policy.idempotent(("GET", "k"))
    assert policy.idempotent(("HKEYS", "k"))
    assert policy.idempotent(("SCRIPT", "LOAD", "return 1"))
    assert policy.idempotent(("EVALSHA", sha1(scripts.READ), 1, "k"))
    assert policy.idempotent(("EVALSHA", sha1(scripts.CACHE), 4, "a", "b", "c", "d"))
    assert not policy.idempotent(("EVALSHA", sha1(write_scripts.WRITE), 1, "k"))
    assert not policy.idempotent(("INCR", "k"))
    assert not policy.idempotent(("LPUSH", "k", "v"))


@pytest.mark.parametrize(
    ("error", "sent_again"),
    [
        (rex.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."), True),
        (MasterNotFoundError("No master found for 'amber'"), True),  # Sentinels mid-failover
        (rex.ReadOnlyError("You can't write against a read only replica."), True),
        (rex.ConnectionError("The previous master is now a slave"), True),  # READONLY, Sentinel
        (rex.ConnectionError("Connection closed by server."), False),  # it may have run
        (rex.TimeoutError("Timeout reading from socket"), False),
    ],
)
def test_a_write_is_sent_again_only_when_it_was_not_run(
    error: rex.RedisError, sent_again: bool
) -> None:
    policy = Policy(5.0)
    calls: list[int] = []

    def send() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return "ok"

    if sent_again:
        assert policy.call(send, ("RPUSH", "k", "v"), lambda: "node") == "ok"
        assert len(calls) == 2
    else:
        with pytest.raises(type(error)):
            policy.call(send, ("RPUSH", "k", "v"), lambda: "node")
        assert len(calls) == 1


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379?clustr=true", "rediss://h:6380/0?sockt_timeout=1"]
)
def test_an_unknown_query_parameter_is_named(url: str) -> None:
    with pytest.raises(ConfigError) as err:
        amber.connect(url, "postgresql://127.0.0.1:1/x")
    assert "unknown query parameter" in err.value.message
    assert url.rpartition("?")[2].partition("=")[0] in err.value.message


def test_known_query_parameters_pass() -> None:
    url = "redis://127.0.0.1:6379/0?socket_timeout=3&client_name=amber&health_check_interval=5"
    assert load_settings(redis_url=url).redis_url == url
