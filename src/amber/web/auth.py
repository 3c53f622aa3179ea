"""Who may read and who may change things through ``amber serve``.

The scheme (docs/operations.md says it for operators):

- **One secret per server.** ``AMBER_SERVE_TOKEN`` when set; otherwise a random token
  made when the process starts, and then the server binds to loopback only.
- **Every change needs the token in a header**: ``X-Amber-Token: <token>`` or
  ``Authorization: Bearer <token>``. A page of another origin cannot send a custom
  header without a CORS preflight, and the server answers no preflight (no CORS
  headers, ``OPTIONS`` refused), so no form, image or script elsewhere can forge a
  change, whatever its cookies; another port on localhost is another origin too.
- **The dashboard learns the token from its own page**: ``/`` carries it in a
  ``<meta>`` tag, and only a page of this origin can read the HTML (the same-origin
  policy; no CORS). With ``AMBER_SERVE_TOKEN`` set, ``/`` first asks for the token and
  keeps a session cookie (HttpOnly, SameSite=Strict) derived from it, so reads work
  from the browser; without it, the page is served to anyone who reaches loopback.
- **Host and Origin are checked** against DNS rebinding (a name that resolves to
  127.0.0.1 makes the browser think the attacker's page is same-origin): without a
  configured token only ``127.0.0.1``, ``localhost`` and ``[::1]`` (with the port) are
  accepted as ``Host``; a request whose ``Origin`` is not this server's own, or whose
  ``Sec-Fetch-Site`` says ``cross-site``/``same-site``, may change nothing.
- **Reads**: open on loopback without a configured token; with one, they need the
  header or the session cookie (``/metrics`` too: scrape with a bearer token).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from amber.errors import ConfigError

TOKEN_HEADER = "x-amber-token"
COOKIE = "amber_session"
SAFE_METHODS = frozenset({"GET", "HEAD"})
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) names this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _with_port(host: str, port: int) -> str:
    has_port = "]:" in host if host.startswith("[") else ":" in host
    return host if has_port else f"{host}:{port}"


@dataclass
class Guard:
    """The token, the hosts accepted, and the checks on each request."""

    token: str
    configured: bool
    """The token came from ``AMBER_SERVE_TOKEN`` (else it was made at start)."""
    hosts: frozenset[str] = field(default_factory=frozenset)
    """Accepted ``Host`` values (``name:port``); empty: any (a configured token guards)."""

    @classmethod
    def build(
        cls, configured: str | None, bind: str, port: int, allow_hosts: Iterable[str] = ()
    ) -> Guard:
        """The guard for a server bound to ``bind:port``; ``ConfigError`` when binding
        beyond loopback without a configured token."""
        if not configured and not is_loopback(bind):
            raise ConfigError(
                f"amber serve binds to {bind} only with a token: set AMBER_SERVE_TOKEN"
                " (or bind to 127.0.0.1)",
                setting="serve_token",
            )
        extra = [_with_port(h.lower(), port) for h in allow_hosts]
        hosts: frozenset[str] = frozenset()
        if not configured or extra:
            hosts = frozenset([f"{n}:{port}" for n in LOOPBACK_NAMES] + extra)
        return cls(configured or secrets.token_urlsafe(32), bool(configured), hosts)

    # -- values ------------------------------------------------------------------------------
    def session_value(self) -> str:
        """The session cookie's value: derived from the token, never the token itself."""
        return hmac.new(self.token.encode(), b"amber-session", hashlib.sha256).hexdigest()

    def token_ok(self, given: str | None) -> bool:
        """Whether ``given`` is the token (compared in constant time)."""
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    # -- checks --------------------------------------------------------------------------
    def host_ok(self, host: str | None) -> bool:
        """The ``Host`` header is one this server answers to."""
        if not self.hosts:
            return True
        return host is not None and host.lower() in self.hosts

    def origin_ok(self, origin: str | None, host: str | None, fetch_site: str | None) -> bool:
        """A change comes from this server's own pages, or from no browser page at all."""
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            return False
        if origin is None:
            return True
        return host is not None and origin.lower() in (f"http://{host}", f"https://{host}")

    def header_token(self, headers: dict[str, str]) -> str | None:
        """The token a request carries in ``X-Amber-Token`` or ``Authorization: Bearer``."""
        given = headers.get(TOKEN_HEADER)
        if given is not None:
            return given
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        return value.strip() if scheme.lower() == "bearer" and value else None

    def may_read(self, headers: dict[str, str], cookie: str | None) -> bool:
        """Reads: open without a configured token (loopback only); else token or cookie."""
        if not self.configured:
            return True
        if self.token_ok(self.header_token(headers)):
            return True
        return cookie is not None and hmac.compare_digest(cookie, self.session_value())

    def may_change(self, headers: dict[str, str]) -> bool:
        """Changes: the token in a header, always (a cookie alone never suffices)."""
        return self.token_ok(self.header_token(headers))
