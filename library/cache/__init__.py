"""The library's server-side cache: keys first, the strategies build on them.

``keys`` is the only place a cache key is spelled; views, services and the course's
labs all call ``cache_key`` so that two callers can never disagree about a key.
"""
