"""The dashboard's rules of access: loopback by default, a token elsewhere, no cross-site writes, strict CSP.

- Bound to a loopback address, it answers local requests; bound to any other address it requires the token
  given with ``--token`` on every request (``Authorization: Bearer``, ``?token=`` once, then a cookie), compared
  in constant time.
- On loopback, ``Host`` must name it (``127.0.0.1``, ``localhost``, ``[::1]`` or the address it is bound to, at its
  port): a page on another site cannot reach it through DNS rebinding.
- Writes (POST) must come from its own pages: a per-session CSRF token (a cookie, repeated in each form) that
  must match, an ``Origin`` that is its own when the browser sends one, and ``Sec-Fetch-Site`` same-origin.
- Every response forbids inline script and any source but itself (Content-Security-Policy), framing, and
  content sniffing.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import UsageError

TOKEN_COOKIE = "agenteval_token"
CSRF_COOKIE = "agenteval_csrf"
CSRF_FIELD = "csrf_token"

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin, not no-referrer: under no-referrer Chromium sends "Origin: null" with our own forms.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is only reachable from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None) -> None:
    """Refuse to serve on a non-loopback address without a token."""
    if not is_loopback(host) and not token:
        raise UsageError(
            f"--host {host} is reachable from other machines: give --token (a long random secret, e.g. "
            "from `python -c 'import secrets; print(secrets.token_urlsafe(32))'`) that every visitor must present"
        )
    if token is not None and len(token) < 16:
        raise UsageError("--token must be at least 16 characters: it is all that guards the dashboard")


class Guard:
    """The rules above as one ASGI middleware, applied before any page runs and to every response it sends.

    A plain ASGI middleware rather than Starlette's ``BaseHTTPMiddleware``: that one relays a response's body
    through a stream of its own and ends it cleanly even when the app failed half way, so a download stopped by
    its time limit reached the client as a short file that looked whole."""

    def __init__(self, app: ASGIApp, host: str, token: str | None) -> None:
        self.app = app
        self.token = token
        # Off loopback the names people reach it by are not known here (0.0.0.0, a proxy); the token guards it
        # there, and a rebound name cannot present it: cookies belong to the name the browser used.
        # The address it is bound to as well: any of 127.0.0.0/8 is loopback, and the link printed names it.
        bound = f"[{host.strip('[]')}]" if ":" in host else host
        self.names = {"localhost", "127.0.0.1", "[::1]", bound} if is_loopback(host) else None

    def _host_ok(self, request: Request) -> bool:
        """On loopback, whether ``Host`` names this server at the port it listens on (``--port 0`` too)."""
        if self.names is None:
            return True
        server = request.scope.get("server")
        return request.headers.get("host") in {f"{name}:{server[1] if server else ''}" for name in self.names}

    def _token_ok(self, request: Request) -> bool:
        if self.token is None:
            return True
        offered = request.cookies.get(TOKEN_COOKIE) or request.query_params.get("token") or ""
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            offered = header[7:]
        return hmac.compare_digest(offered.encode(), self.token.encode())

    def _same_origin(self, request: Request) -> str | None:
        """Why a write is refused as cross-site, or None."""
        origin = request.headers.get("origin")
        # https too: behind the TLS proxy docs/dashboard.md advises off loopback, the browser's origin is https.
        host = request.headers.get("host")
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            return f"origin {origin} is not this dashboard"
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return f"a {site} request may not write"
        form_token = request.state.form_csrf if hasattr(request.state, "form_csrf") else None
        cookie = request.cookies.get(CSRF_COOKIE)
        if not cookie or not form_token or not hmac.compare_digest(cookie.encode(), form_token.encode()):
            return "the form's CSRF token is missing or stale: reload the page and try again"
        return None

    async def _refusal(self, request: Request) -> Response | None:
        """The response that turns ``request`` away (or, for a link with the token, sends it on), or None."""
        if not self._host_ok(request):
            return PlainTextResponse("unknown Host", status_code=421)
        if not self._token_ok(request):
            return PlainTextResponse("a token is required: open the link the dashboard printed", 401)
        if request.method not in ("GET", "HEAD"):
            try:
                form = await request.form()
            except HTTPException as exc:
                # A field past the parser's limit (1 MB), a multipart body without its boundary: raised here, in
                # the middleware, it would pass Starlette's handling of it and end as a 500 with a traceback.
                return PlainTextResponse(f"the form cannot be read: {exc.detail}", status_code=400)
            # The body is read once: the page handler takes the form from here (request.state is the scope's).
            request.state.form = form
            request.state.form_csrf = str(form.get(CSRF_FIELD) or "")
            refused = self._same_origin(request)
            if refused:
                return PlainTextResponse(f"refused: {refused}", status_code=403)
        if self.token is not None and request.query_params.get("token"):
            # The token leaves the address bar: from now on the cookie carries it.
            kept = request.url.remove_query_params("token")  # the rest of a shared link stays: its page, its filters
            return RedirectResponse(kept.path + (f"?{kept.query}" if kept.query else ""), 303)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        refusal = await self._refusal(request)
        csrf = request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(32)
        request.state.csrf = csrf
        cookies = []
        if refusal is None or refusal.status_code == 303:  # a page, or the redirect that takes the token
            if request.cookies.get(CSRF_COOKIE) != csrf:
                cookies.append(_cookie(CSRF_COOKIE, csrf))
            if self.token is not None and request.cookies.get(TOKEN_COOKIE) != self.token:
                cookies.append(_cookie(TOKEN_COOKIE, self.token))

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers[name] = value
                for cookie in cookies:
                    headers.append("set-cookie", cookie)
            await send(message)

        await (self.app if refusal is None else refusal)(scope, receive, secured)


def _cookie(name: str, value: str) -> str:
    """A ``Set-Cookie`` value for the dashboard's cookies: not for scripts, not sent from other sites."""
    response = Response()
    response.set_cookie(name, value, httponly=True, samesite="strict")
    return response.headers["set-cookie"]


def same_site_path(target: str) -> str:
    """A redirect target from a form, kept to a path of this site."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    # Browsers read a backslash as a slash and drop tabs and newlines from an address, so "/\\host" and
    # "/\t/host" lead to another site as "//host" does.
    if "\\" in target or any(ord(c) < 0x20 or c == "\x7f" for c in target):
        return "/"
    return target
