"""Plain HTTP answers: the static pages and JSON, as ``websockets`` responses.

The pages are plain files in ``web/static/`` (no build step). A page route names one file;
``/static/<path>`` serves any file under the static folder, and nothing outside it: the
path is decoded, refused if any segment is empty, ``.`` or ``..`` or holds a backslash or
NUL, then resolved (symbolic links included) and served only if it still lies inside.
"""

from __future__ import annotations

from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from websockets.datastructures import Headers
from websockets.http11 import Response

from arena.text import encodable
from web.protocol import dumps

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

PAGES = {
    "/": "index.html",
    "/match": "match.html",
    "/replay": "replay.html",
    "/run": "run.html",
    "/play": "play.html",
    "/leaderboard": "leaderboard.html",
}
"""Page routes and the file each one serves."""

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
    ".json": "application/json",
}
"""Files of other kinds are served as plain text (``LICENSE`` files) or refused."""

MAX_STATIC_BYTES = 4 * 1024 * 1024
"""Largest static file served."""

SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    (
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
        "connect-src 'self'; frame-ancestors 'none'",
    ),
)


def response(
    status: HTTPStatus, body: bytes, content_type: str, *, cache: bool = False
) -> Response:
    """An HTTP response with the security headers."""
    headers = Headers()
    headers["Content-Type"] = content_type
    headers["Content-Length"] = str(len(body))
    headers["Cache-Control"] = "max-age=300" if cache else "no-store"
    for name, value in SECURITY_HEADERS:
        headers[name] = value
    return Response(status.value, status.phrase, headers, body)


def json_response(payload: Any, status: HTTPStatus = HTTPStatus.OK) -> Response:
    """``payload`` as a JSON response (always encodable: ``web.protocol.dumps``). Raises
    TypeError/ValueError for values JSON cannot hold."""
    return response(status, dumps(payload).encode(), "application/json; charset=utf-8")


def json_error(status: HTTPStatus, code: str, message: str) -> Response:
    """An error as JSON: ``{"error": code, "message": ...}``."""
    return json_response({"error": code, "message": message}, status)


def safe_static_path(static_dir: Path, url_path: str) -> Path | None:
    """The file under ``static_dir`` that ``url_path`` (relative, percent-encoded) names,
    or None when it names nothing servable or anything outside ``static_dir``."""
    decoded = unquote(url_path)
    if not decoded or "\x00" in decoded or "\\" in decoded or decoded.startswith("/"):
        return None
    parts = decoded.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    root = static_dir.resolve()
    try:
        path = root.joinpath(*parts).resolve(strict=True)
    except (OSError, RuntimeError, ValueError):
        return None
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path


def static_file(static_dir: Path, url_path: str) -> Response:
    """The file ``url_path`` names under ``static_dir``, or a 404."""
    path = safe_static_path(static_dir, url_path)
    if path is None:
        return not_found()
    content_type = CONTENT_TYPES.get(path.suffix.lower())
    if content_type is None:
        if path.suffix:
            return not_found()
        content_type = "text/plain; charset=utf-8"  # LICENSE and the like
    try:
        if path.stat().st_size > MAX_STATIC_BYTES:
            return not_found()
        body = path.read_bytes()
    except OSError:
        return not_found()
    return response(HTTPStatus.OK, body, content_type, cache=path.parent.name == "vendor")


def page(static_dir: Path, route: str) -> Response | None:
    """The page for ``route``, or None when it is not a page route."""
    name = PAGES.get(route)
    if name is None:
        return None
    return static_file(static_dir, name)


def not_found() -> Response:
    """A plain 404."""
    return response(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")


def text(status: HTTPStatus, message: str) -> Response:
    """A plain text response."""
    return response(status, (encodable(message) + "\n").encode(), "text/plain; charset=utf-8")
