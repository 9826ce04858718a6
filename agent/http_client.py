"""The agent's HTTP client, standard library only: one exchange (`request`) for every server the
agent asks (a `stagelens serve`, an engine's /metrics, Prometheus, an OTLP collector), and
`get_json` for a serve's API.

The whole exchange (name lookup, connect, headers, body) has one deadline, and the answer a size
cap: a socket timeout alone bounds each read, so a server that sent a byte every few seconds held a
command for minutes, and one that never stopped sending filled memory. The name lookup has no
timeout of its own (the resolver's, often 5 s a server and attempt), so it runs in a daemon thread
the caller stops waiting for.
"""

from __future__ import annotations

import base64
import functools
import http.client
import io
import ipaddress
import re
import socket
import threading
import time
import urllib.parse

from stagelens.errors import CollectError, UserError
from stagelens.json_answer import MAX_ITEMS, AnswerRefused, parse_answer
from stagelens.printable import printable

MAX_ANSWER_BYTES = 16 * 2**20
_CHUNK = 64 * 2**10


_USERINFO = re.compile(r"^((?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//)[^/?#]*@")


def redact_url(url: str) -> str:
    """`url` as it may be shown: its userinfo (`user:password@`) replaced by `***@`. Credentials
    in a URL are used (`request` sends them as Basic auth) but never written to stderr, a frame
    or a label."""
    return _USERINFO.sub(r"\1***@", url)


def check_url(base_url: str, message: str | None = None) -> urllib.parse.SplitResult:
    """`base_url` split, if it is an http(s) URL with a host; UserError naming it otherwise, or
    saying `message` (for a URL that is not a `stagelens serve`'s)."""
    try:
        parts = urllib.parse.urlsplit(base_url)
        # .port may raise
        usable = parts.scheme in ("http", "https") and parts.hostname and parts.port != 0
    except ValueError as exc:
        if message:
            raise UserError(message) from None
        raise UserError(f"{redact_url(base_url)}: not a valid URL ({exc})") from None
    if not usable:
        raise UserError(message or f"{redact_url(base_url)}: expected the http:// or https:// URL of a "
                        "`stagelens serve`")
    return parts


def get_json(base_url: str, path: str, timeout: float = 5.0, token: str | None = None,
             max_bytes: int = MAX_ANSWER_BYTES, max_items: int = MAX_ITEMS):
    """GET `base_url` + `path` as JSON within `timeout` seconds in all, parsed once, bounded and
    made printable (agent.json_answer); CollectError when the server does not answer in time,
    answers an error, too much (bytes or items) or not JSON; UserError for a URL that is not
    http(s)."""
    url = base_url.rstrip("/") + path
    parts = check_url(url)
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        body = _get(parts, headers, time.monotonic() + timeout, max_bytes)
    except _Status as exc:
        raise CollectError(f"{redact_url(url)}: HTTP {printable(str(exc))[:200]}") from None
    except EXCHANGE_ERRORS as exc:
        raise CollectError(f"{redact_url(url)}: could not collect: {exchange_reason(exc, timeout, max_bytes)}") \
            from None
    try:
        return parse_answer(body, max_items)
    except AnswerRefused as exc:
        raise CollectError(f"{redact_url(url)}: the answer {exc}") from None


class AnswerTooLarge(Exception):
    """An answer past the size its caller allows."""


class AnswerUnfinished(TimeoutError):
    """The deadline came while the answer's body was still coming (`read` bytes of it): the
    server answered, with a body it did not end in time (a drip, or bytes forever)."""

    def __init__(self, read: int) -> None:
        super().__init__(read)
        self.read = read


# what `request` raises (TimeoutError: OSError)
EXCHANGE_ERRORS = (AnswerTooLarge, OSError, http.client.HTTPException)


def exchange_reason(exc: Exception, timeout_s: float, max_bytes: int, os_error: str = "{}") -> str:
    """Why `request` failed with `exc` (one of EXCHANGE_ERRORS), in one line; `os_error` says how
    a socket error's own reason is put ("could not connect: {}")."""
    if isinstance(exc, AnswerTooLarge):
        return f"the answer is larger than {max_bytes} bytes"
    if isinstance(exc, AnswerUnfinished):
        return (f"no complete answer within {timeout_s:g} s: its body was still coming after "
                f"{exc.read:,} bytes")
    if isinstance(exc, TimeoutError):
        return f"no complete answer within {timeout_s:g} s"
    if isinstance(exc, http.client.HTTPException):   # before OSError: RemoteDisconnected is both
        return f"not an HTTP answer ({type(exc).__name__})"
    return os_error.format(getattr(exc, "strerror", None) or exc)


class _Status(Exception):
    pass


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


class _DeadlineReader(io.RawIOBase):
    """The socket read with what is left of the deadline as its timeout, set before every read."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock, self._deadline = sock, deadline
        # holds the socket open, as http.client's own reader
        self._raw = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int | None:
        self._sock.settimeout(_left(self._deadline))
        return self._raw.readinto(b)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args, deadline: float, **kwargs) -> None:
        super().__init__(sock, *args, **kwargs)
        plain, self.fp = self.fp, io.BufferedReader(_DeadlineReader(sock, deadline))
        plain.close()


def _get(parts: urllib.parse.SplitResult, headers: dict, deadline: float, max_bytes: int) -> bytearray:
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    status, reason, body = request("GET", parts, target, headers, deadline, max_bytes)
    if not 200 <= status < 300:
        raise _Status(f"{status} {reason}")
    return body


def request(method: str, parts: urllib.parse.SplitResult, target: str, headers: dict, deadline: float,
            max_bytes: int, body: bytes | None = None) -> tuple[int, str, bytearray]:
    """(status, reason, body) of one HTTP exchange, connect, headers and body all within
    `deadline` (monotonic); TimeoutError past it, AnswerTooLarge past `max_bytes`, OSError or
    HTTPException otherwise. A redirect is an answer like any other (its status), never followed:
    the URL asked is the one blamed. The URL's userinfo, if any, goes as Basic auth."""
    if parts.username is not None and "Authorization" not in headers:
        headers = {**headers, "Authorization": basic_auth(parts)}
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=_left(deadline))
    # http.client's own hook for opening the socket (socket.create_connection): the lookup waits no
    # longer
    conn._create_connection = lambda address, timeout, source: connect_within(address, deadline)
    conn.response_class = functools.partial(_DeadlineResponse, deadline=deadline)
    response = None
    try:
        # connects, with the time left as its timeout
        conn.request(method, target, body=body, headers=headers)
        response = conn.getresponse()
        length = response.getheader("Content-Length", "")
        if length.isdigit() and int(length) > max_bytes:
            raise AnswerTooLarge
        # not bytes(answer): a copy doubled the cap's cost
        return response.status, response.reason, _body(response, max_bytes)
    finally:
        if response is not None:
            response.close()
        conn.close()


def _body(response: http.client.HTTPResponse, max_bytes: int) -> bytearray:
    """The answer's body, at most `max_bytes` (AnswerTooLarge past them), by the deadline its reader
    keeps (AnswerUnfinished at it, with the bytes read)."""
    answer = bytearray()
    try:
        while chunk := response.read1(_CHUNK):
            answer += chunk
            if len(answer) > max_bytes:
                raise AnswerTooLarge
    except TimeoutError:
        raise AnswerUnfinished(len(answer)) from None
    return answer


def basic_auth(parts: urllib.parse.SplitResult) -> str:
    """The Authorization header's value for the URL's `user:password@`."""
    pair = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")


def connect_within(address: tuple[str, int], deadline: float) -> socket.socket:
    """A TCP connection to (host, port), the name lookup and each address's connect within
    `deadline`."""
    host, port = address
    error: OSError = OSError(f"{host}: no address to connect to")
    for family, kind, proto, _, sockaddr in _resolve(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(sockaddr)
            return sock
        # TimeoutError too: the next address would have no time left either
        except OSError as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                raise
            error = exc
    raise error


def _resolve(host: str, port: int, deadline: float) -> list:
    """getaddrinfo's answer, or TimeoutError at the deadline while the lookup goes on in its
    thread."""
    try:
        ipaddress.ip_address(host)
        # a literal: nothing to look up
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except ValueError:
        pass
    answer: dict = {}
    done = threading.Event()

    def look_up() -> None:
        try:
            answer["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            answer["error"] = exc
        finally:
            done.set()

    threading.Thread(target=look_up, name="stagelens-resolve", daemon=True).start()
    if not done.wait(_left(deadline)):
        raise TimeoutError
    if "error" in answer:
        raise answer["error"]
    return answer["infos"]
