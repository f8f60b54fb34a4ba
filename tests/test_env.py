from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from arena.env import env_bool, env_int, env_list, parse_database_url, parse_redis_url


def test_postgres_urls_become_django_settings():
    db = parse_database_url(
        "postgres://arena:p%40ss@db.local:6543/arena?sslmode=require", base_dir=Path("/x")
    )
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == (
        "arena",
        "p@ss",
        "db.local",
        "6543",
        "arena",
    )
    assert db["OPTIONS"] == {"sslmode": "require"}


def test_sqlite_paths_are_relative_to_the_project_unless_absolute():
    assert (
        parse_database_url("sqlite:///var/a.sqlite3", base_dir=Path("/proj"))["NAME"]
        == "/proj/var/a.sqlite3"
    )
    assert (
        parse_database_url("sqlite:////tmp/a.sqlite3", base_dir=Path("/proj"))["NAME"]
        == "/tmp/a.sqlite3"
    )


@pytest.mark.parametrize("url", ["mysql://x/y", "postgres://host/", "sqlite://"])
def test_unusable_database_urls_are_refused_with_the_reason(url):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        parse_database_url(url, base_dir=Path("/proj"))


def test_redis_urls_must_be_redis():
    assert parse_redis_url("redis://127.0.0.1:6379/1") == "redis://127.0.0.1:6379/1"
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL"):
        parse_redis_url("http://127.0.0.1:6379")


def test_typed_values_fail_loudly_and_name_the_variable(monkeypatch):
    monkeypatch.setenv("X_BOOL", "maybe")
    monkeypatch.setenv("X_INT", "ten")
    monkeypatch.setenv("X_SMALL", "0")
    monkeypatch.setenv("X_LIST", " a, b ,,c ")
    with pytest.raises(ImproperlyConfigured, match="X_BOOL"):
        env_bool("X_BOOL", False)
    with pytest.raises(ImproperlyConfigured, match="X_INT"):
        env_int("X_INT", 1)
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env_int("X_SMALL", 5, minimum=1)
    assert env_list("X_LIST", []) == ["a", "b", "c"]
    assert env_bool("X_UNSET", True) is True
