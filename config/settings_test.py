"""Test settings: the same settings, with test defaults for the environment.

Only environment defaults differ, so the suite exercises the production wiring. Tests
use Redis database 15 so a running `make run` on database 0 is left alone.
"""

import os

os.environ.setdefault("DEBUG", "true")
# Under pytest-xdist each worker gets a Redis database of its own (its tests flush
# it); the database itself gets a per-worker name from pytest-django. 12-14 are the
# cluster and benchmarks; the labs' sandboxes take none (each runs a Redis server of
# its own). A second suite beside the first (a load for the first, or a second
# checkout) names other databases in LIBRARY_TEST_REDIS_DBS, e.g. "8,9,10,11".
_REDIS_DBS = os.environ.get("LIBRARY_TEST_REDIS_DBS", "15,7,6,5").split(",")
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker is not None:
    _index = int(_worker.removeprefix("gw"))
    if _index >= len(_REDIS_DBS):
        raise RuntimeError(f"at most {len(_REDIS_DBS)} xdist workers")
    os.environ["LIBRARY_REDIS_DB"] = _REDIS_DBS[_index]
os.environ.setdefault("LIBRARY_REDIS_DB", _REDIS_DBS[0])
# Channel groups of this run only (child daphnes inherit it): two test runs on one
# machine must not see each other's broadcasts.
os.environ.setdefault("LIBRARY_CHANNEL_PREFIX", f"asgi-test-{os.getpid()}")
# The explorable page's model runs in the process that serves it, where a test can
# count them; a test that wants the worker processes (course.model_pool) asks.
os.environ.setdefault("LIBRARY_LAB_EXPLORE_PROCESSES", "0")
# The tests' answers all come from one address and the minute's window outlives a
# test; the test of the limit sets its own.
os.environ.setdefault("LIBRARY_LAB_CHALLENGE_ANSWERS_PER_MINUTE", "100000")
# A cheap password hash, in this process and the ones it starts (see settings).
os.environ.setdefault("LIBRARY_FAST_PASSWORD_HASHER", "true")

# After the environment above: the settings read it when imported.
from config.settings import *  # noqa: E402, F403

# WhiteNoise warns about a missing STATIC_ROOT on every request; tests never collect.
STATIC_ROOT.mkdir(exist_ok=True)  # noqa: F405

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # One file per test run, so two runs on one machine never share (and delete) it.
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": str(VAR_DIR / f"test-library-{os.getpid()}.sqlite3")  # noqa: F405
    }
