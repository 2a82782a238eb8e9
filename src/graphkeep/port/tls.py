"""TLS failures and TLS options, once for the three clients (docs/security.md, "TLS").

A driver reports a failed TLS handshake its own way: redis-py as a ``ConnectionError`` whose
cause is Python's ``ssl`` error (or a handshake that timed out), PyMongo as the text of a
``ServerSelectionTimeoutError`` or of a server description's error, botocore as its
``SSLError``. :func:`tls_reason` reads any of them (the exception, its causes and their
text) and says what failed in words an operator acts on: a certificate the client does not
trust, a certificate for another host name, a port that does not speak TLS, a client
certificate the server refused. A TLS failure is not worth another attempt (the same
certificate fails the same way): the executors raise :func:`tls_unavailable` at once.

A misspelt TLS option would otherwise be a ``TypeError`` at the first request (redis-py) or
a warning and a plain-text connection attempt (PyMongo): :func:`check_tls_options` refuses
it when the client is made, naming the options the driver knows.
"""

from __future__ import annotations

import difflib
import ssl
from collections.abc import Iterable

from graphkeep.errors import ConfigurationError, StorageUnavailable

__all__ = [
    "TLS_CONNECT_TIMEOUT",
    "check_tls_options",
    "is_tls_option",
    "tls_reason",
    "tls_unavailable",
]

#: a handshake that got no TLS answer: the client spoke TLS to a port that does not. Only
#: handshake-time words: an ``SSLEOFError`` on a read (a server restarting under an open
#: connection) is a dropped connection, retried like any other
_NO_TLS_ANSWER = (
    "handshake operation timed out",
    "wrong version number",
    "wrong_version_number",
    "record layer failure",
    "packet length too long",
)


#: what a client that cannot tell a TCP connect from its TLS handshake (asyncio's) says when
#: the two together timed out (see :func:`tls_reason`)
TLS_CONNECT_TIMEOUT = "tls connection timed out"


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (``__cause__``, else ``__context__``), each once."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def tls_reason(exc: BaseException, ca: str = "the CA file option") -> str | None:
    """What failed in TLS terms when ``exc`` (or a cause) is a failed TLS handshake, else
    None (the markers it reads are OpenSSL's and Python's ``ssl`` module's own words);
    ``ca`` names the option that gives the CA to trust."""
    chain = _chain(exc)
    text = " | ".join(str(e) for e in chain)
    lowered = text.lower()
    for error in chain:
        if isinstance(error, ssl.SSLCertVerificationError):
            message = getattr(error, "verify_message", None) or str(error)
            return _verification(str(message), lowered, ca)
    if "hostname" in lowered and "doesn't match" in lowered:  # urllib3's own check
        return _verification(_detail(text, "hostname"), "hostname mismatch", ca)
    if "certificate_verify_failed" in lowered or "certificate verify failed" in lowered:
        return _verification(_detail(text, "certificate verify failed"), lowered, ca)
    if TLS_CONNECT_TIMEOUT in lowered:
        return (
            "no TLS connection within the connect timeout (a plain, non-TLS port? or no server"
            " answering at this address)"
        )
    if any(marker in lowered for marker in _NO_TLS_ANSWER):
        return (
            "the server at this port did not answer the TLS handshake (a plain, non-TLS"
            " port? check the port and the scheme)"
        )
    if "tlsv13 alert certificate required" in lowered or "certificate required" in lowered:
        return (
            "the server requires a client certificate and none was sent (give the client"
            " certificate and key)"
        )
    if "unknown ca" in lowered or "bad certificate" in lowered:
        return "the server refused the client certificate (signed by a CA it does not trust)"
    handshake = "handshake" in lowered or "connecting to" in lowered  # PyMongo's, redis-py's
    for error in chain:
        if handshake and isinstance(error, ssl.SSLError) and not _dropped(error):
            return f"TLS handshake failed ({error.reason or error})"
    if "ssl handshake failed" in lowered and "[ssl:" in lowered:
        return f"TLS handshake failed ({_detail(text, '[SSL:')})"
    return None


def _dropped(error: ssl.SSLError) -> bool:
    """The connection closed under TLS (not a refusal of the handshake's terms)."""
    return isinstance(error, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError))


def _verification(message: str, lowered: str, ca: str) -> str:
    if "hostname mismatch" in lowered or "ip address mismatch" in lowered:
        return (
            "the server's certificate is not valid for the host name connected to (wrong host"
            f" name: {message.strip()}); connect by a name the certificate lists"
        )
    if "expired" in lowered:
        return f"the server's certificate has expired ({message.strip()})"
    return (
        f"the server's certificate is not trusted ({message.strip()}); give the CA that"
        f" signed it ({ca})"
    )


def _detail(text: str, marker: str) -> str:
    start = text.lower().find(marker.lower())
    if start < 0:
        return text[:200]
    return text[start : start + 200].split(" (configured timeouts")[0].split(" | ")[0]


def tls_unavailable(backend: str, where: str, reason: str) -> StorageUnavailable:
    """The error of a TLS failure: the backend and server (password masked by the caller),
    "TLS", and what failed; never "is the server running?" (it answered)."""
    return StorageUnavailable(f"{backend} at {where}: TLS connection failed: {reason}")


def server_unavailable(backend: str, where: str, exc: BaseException, ca: str) -> StorageUnavailable:
    """The error of a server that could not be reached: its TLS failure where that is what
    failed (:func:`tls_unavailable`), else "is the server running and reachable?"."""
    reason = tls_reason(exc, ca)
    if reason is not None:
        return tls_unavailable(backend, where, reason)
    return StorageUnavailable(
        f"{backend} at {where} is unavailable ({type(exc).__name__}: {exc}); is the server"
        " running and reachable? (locally: ./dev services up)"
    )


def is_tls_option(name: str) -> bool:
    """A URL option that configures TLS by its name (``ssl…``, ``tls…``)."""
    lowered = name.lower()
    return lowered.startswith(("ssl", "tls"))


def check_tls_options(
    names: Iterable[str], known: Iterable[str], *, backend: str, url: str, fold: bool = False
) -> None:
    """Refuse a TLS option of ``names`` that is not one of ``known`` (compared lower-cased
    when ``fold``: PyMongo's options are case-insensitive), naming the closest and all."""
    known = sorted(set(known))
    table = {k.lower() if fold else k: k for k in known}
    for name in names:
        if not is_tls_option(name) or (name.lower() if fold else name) in table:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigurationError(
            f"unknown TLS option {name!r} in the {backend} URL {url}{hint}; the TLS options"
            f" are: {', '.join(known)}"
        )
