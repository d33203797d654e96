"""The Redis database the cache tests write to.

Not 15 (the suite's shared database, flushed by other tests' fixtures at any moment)
and not 14 (the benchmarks empty it): timing-sensitive lock and refresh tests need a
database nothing else clears under them. Their keys carry a per-test tag and are
deleted afterwards, so the database is never flushed.
"""

import os

CACHE_TEST_DB = int(os.environ.get("LIBRARY_CACHE_TEST_REDIS_DB", "12"))
