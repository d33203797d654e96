import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_int, env_list, env_str


def test_bool_accepts_the_usual_spellings():
    assert env_bool("X", False, env={"X": "yes"}) is True
    assert env_bool("X", True, env={"X": "Off"}) is False
    assert env_bool("X", True, env={}) is True


def test_bad_bool_names_the_variable():
    with pytest.raises(ImproperlyConfigured, match="DEBUG"):
        env_bool("DEBUG", False, env={"DEBUG": "maybe"})


def test_bad_int_names_the_variable_and_bound():
    with pytest.raises(ImproperlyConfigured, match="PORT must be an integer"):
        env_int("PORT", 1, env={"PORT": "eighty"})
    with pytest.raises(ImproperlyConfigured, match="PORT must be at least 1"):
        env_int("PORT", 1, minimum=1, env={"PORT": "0"})


def test_required_string_names_the_variable():
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY must be set"):
        env_str("SECRET_KEY", env={})


def test_list_drops_blanks():
    assert env_list("HOSTS", [], env={"HOSTS": "a.example, ,b.example,"}) == [
        "a.example",
        "b.example",
    ]
