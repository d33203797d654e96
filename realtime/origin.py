"""Which pages may open a WebSocket here: the site's own origin, scheme, host and port.

A browser sends the page's origin with every WebSocket handshake and lets any page
open a socket to any server, cookies included, so the server must refuse pages of
other origins itself (cross-site WebSocket hijacking). Channels'
``AllowedHostsOriginValidator`` compares the Origin's host with ``ALLOWED_HOSTS``
only, which name no scheme and no port: ``http://127.0.0.1:9999`` passed for a site
on port 8000, and any other service on an allowed host could drive a signed-in
user's live shelf.

The rule is Django's CSRF origin check: the Origin must equal the origin the
handshake was made to (its scheme, and the Host header, whose host must be
allowed), or one of ``CSRF_TRUSTED_ORIGINS`` (a site behind a proxy that changes
the Host). A default port is the same as no port.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_DEFAULT_PORTS = {"http": 80, "https": 443}


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int


def origin_parse(text: str) -> Origin | None:
    """Return the scheme, host and port of ``text``, or None if it is not an origin.

    Only ``http`` and ``https`` pages are origins a browser sends for a page of this
    site; ``null`` (a sandboxed frame, a file) and anything malformed are None.
    """
    try:
        parts = urlsplit(text.strip().lower())
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.path not in ("", "/") or parts.query or parts.username is not None:
        return None
    return Origin(parts.scheme, parts.hostname, port or _DEFAULT_PORTS[parts.scheme])


def _headers(scope: Scope) -> dict[str, str]:
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
    }


def _is_secure(scope: Scope, headers: dict[str, str]) -> bool:
    # As HttpRequest.is_secure: the proxy's header when one is configured.
    if scope.get("scheme") in ("wss", "https"):
        return True
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy is None:
        return False
    meta_name, secure_value = proxy
    name = meta_name.removeprefix("HTTP_").replace("_", "-").lower()
    forwarded = headers.get(name, "").split(",")[0].strip()
    return forwarded == secure_value


def _allowed_hosts() -> list[str]:
    # As HttpRequest.get_host: in DEBUG with no ALLOWED_HOSTS, the local names.
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def own_origin(scope: Scope) -> Origin | None:
    """Return the origin this handshake was made to, or None if its Host is refused."""
    headers = _headers(scope)
    host = headers.get("host", "")
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return None
    scheme = "https" if _is_secure(scope, headers) else "http"
    return origin_parse(f"{scheme}://{host}")


def _trusted(origin: Origin) -> bool:
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        # "https://*.example.org" trusts the subdomains, as Django's CSRF check does.
        wildcard = "://*." in entry
        trusted = origin_parse(entry.replace("://*.", "://", 1))
        if trusted is None or trusted._replace(host=origin.host) != origin:
            continue  # another scheme or port
        if origin.host == trusted.host:
            return True
        if wildcard and is_same_domain(origin.host, f".{trusted.host}"):
            return True
    return False


def origin_allowed(scope: Scope) -> bool:
    """Return whether the handshake's Origin is this site's own or a trusted one."""
    sent = _headers(scope).get("origin")
    origin = origin_parse(sent) if sent is not None else None
    if origin is None:
        return False
    return origin == own_origin(scope) or _trusted(origin)


class SameOriginValidator:
    """Refuse a WebSocket handshake from a page of another origin (403)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator guards WebSocket connections only")
        if origin_allowed(scope):
            await self.application(scope, receive, send)
            return
        await WebsocketDenier()(scope, receive, send)
