"""Which ``Host`` and ``Origin`` headers the server answers: the defence against DNS
rebinding. No I/O.

A page on ``evil.example`` can make a browser resolve ``evil.example`` to 127.0.0.1 and
then read ``http://evil.example:8765/api/...`` as same-origin, or open its WebSocket: the
request reaches the server with ``Host: evil.example``. So every request must name the
server by an address it answers to: the address it is bound to (for loopback, also
``localhost``, ``127.0.0.1`` and ``[::1]``; when bound to every interface, any IP address,
which a rebinding attack cannot use), or a name on the allow list (``allowed_hosts``,
``arena serve --allow-host``). A WebSocket opened by a browser must also come from a page
of such an address (``Origin``); clients that send no ``Origin`` (scripts) are let in.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

DEFAULT_HOST = "127.0.0.1"
"""The address the server binds to unless told otherwise: loopback only."""
DEFAULT_PORT = 8765
"""The port the server listens on unless told otherwise."""
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD = ("", "0.0.0.0", "::")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """True when ``host`` only accepts connections from this machine."""
    if host in LOOPBACK_NAMES or host.startswith("127."):
        return True
    return _is_ip(host) and ipaddress.ip_address(host).is_loopback


def host_name(value: str) -> str | None:
    """The host name of a ``Host`` header value (``name``, ``name:port``, ``[v6]:port``),
    lower-cased, without a trailing dot; None when it is malformed."""
    value = value.strip().lower()
    if not value or any(c.isspace() for c in value) or "@" in value or "/" in value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (value[end + 1 :] and not value[end + 1 :].startswith(":")):
            return None
        name, port = value[1:end], value[end + 2 :]
    else:
        name, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    return name.rstrip(".") or None


class HostCheck:
    """The names this server answers to.

    ``bound_host``: the address it listens on. ``allowed``: more host names (or ``*`` for
    any, which turns the check off).
    """

    def __init__(self, bound_host: str, allowed: Iterable[str] = ()) -> None:
        bound = bound_host.strip("[]").lower()
        self.any = False
        self.any_ip = bound in WILDCARD
        self.names: set[str] = set()
        if bound not in WILDCARD:
            self.names.add(bound)
        if self.any_ip or is_loopback(bound):
            self.names.update(LOOPBACK_NAMES)
        for name in allowed:
            if name.strip() == "*":
                self.any = True
            else:
                parsed = host_name(name)
                if parsed is None:
                    raise ValueError(f"{name!r} is not a host name")
                self.names.add(parsed)

    def allows(self, name: str) -> bool:
        """True when the server answers to host ``name``."""
        return self.any or name in self.names or (self.any_ip and _is_ip(name))

    def host_error(self, header: str | None) -> str | None:
        """Why a request with this ``Host`` header is refused, or None."""
        if self.any:
            return None
        if not header:
            return "a Host header is required"
        name = host_name(header)
        if name is None or not self.allows(name):
            return (
                f"this server does not answer to Host {header[:100]!r}: use its address, or "
                "start it with --allow-host NAME"
            )
        return None

    def origin_error(self, origin: str | None) -> str | None:
        """Why a WebSocket from a page of ``origin`` is refused, or None (no ``Origin``:
        not a browser)."""
        if origin is None or self.any:
            return None
        try:
            parts = urlsplit(origin.strip())
        except ValueError:
            parts = None
        name = host_name(parts.netloc) if parts is not None and parts.netloc else None
        if parts is None or parts.scheme not in ("http", "https") or name is None:
            return f"cross-origin WebSocket refused (Origin {origin[:100]!r})"
        if not self.allows(name):
            return (
                f"cross-origin WebSocket refused (Origin {origin[:100]!r}): open the page from "
                "this server's address, or start it with --allow-host NAME"
            )
        return None
