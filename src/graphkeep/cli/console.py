"""Terminal plumbing for the ``graphkeep`` command: exits, masking, progress, tables, units.

Everything the commands print goes through here, so that credentials are masked
in every message and progress bars appear only on an interactive stderr.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO
from urllib.parse import urlsplit

from graphkeep.checkpoint.health import id_time
from graphkeep.errors import mask_url

#: exit codes (documented in ``graphkeep --help``)
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_THRESHOLD = 3
EXIT_NOT_FOUND = 4


class CliError(Exception):
    """An error the command reports as one line and an exit code."""

    code = EXIT_ERROR


class UsageError(CliError):
    code = EXIT_USAGE


class NotFound(CliError):
    code = EXIT_NOT_FOUND


def interactive(stream: Any) -> bool:
    """Is ``stream`` (stdin) a terminal someone can answer a prompt on?"""
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


# -- masking ---------------------------------------------------------------------------


def safe_url(url: str) -> str:
    """``url`` with its password and secret query values masked, otherwise unchanged.

    (``mask_url`` re-assembles every URL, which turns ``sqlite:////abs.db`` into
    ``sqlite://abs.db``; only URLs that carry a secret go through it here.)
    """
    masked = mask_url(url)
    try:
        parts = urlsplit(url)
        has_secret = parts.password is not None or (
            "?" in url and masked.split("?", 1)[-1] != url.split("?", 1)[-1]
        )
    except ValueError:
        return masked
    return masked if has_secret else url


@dataclass
class Opened:
    """What a command opened at ``url``; ``label`` names it in messages (password masked)."""

    url: str

    @property
    def label(self) -> str:
        return safe_url(self.url)


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")


class Masker:
    """Masks passwords of URLs in any text: URLs found by shape and secrets seen on argv."""

    def __init__(self) -> None:
        self.secrets: set[str] = set()

    def remember(self, url: str) -> None:
        try:
            parts = urlsplit(url)
            password = parts.password
        except ValueError:
            return
        if password and len(password) >= 3:
            self.secrets.add(password)
        for match in re.finditer(
            r"(?i)(?:password|secret|token|aws_secret_access_key|aws_session_token)=([^&]+)",
            parts.query,
        ):
            if len(match.group(1)) >= 3:
                self.secrets.add(match.group(1))

    def forget(self) -> None:
        """Forget the secrets seen so far (each command masks those of its own URLs)."""
        self.secrets.clear()

    def __call__(self, text: str) -> str:
        text = _URL.sub(lambda m: safe_url(m.group(0)), text)
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text


MASK = Masker()


def mask(text: str) -> str:
    return MASK(text)


# -- progress --------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        stream: TextIO | None = None,
        enabled: bool = True,
        unit: str = "",
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = enabled and bool(isatty and isatty())
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self.detail = ""
        self._drawn = 0.0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def advance(self, amount: int = 1, detail: str = "") -> None:
        self.done += amount
        if detail:
            self.detail = detail
        self._draw()

    def set_total(self, total: int | None) -> None:
        self.total = total
        self._draw(force=True)

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        finished = self.total is not None and self.done >= self.total
        if not force and not finished and now - self._drawn < 0.1:
            return
        self._drawn = now
        count = _amount(self.done, self.unit)
        if self.total:
            width = 24
            filled = min(width, int(width * self.done / self.total))
            bar = "#" * filled + "-" * (width - filled)
            line = f"{self.label} [{bar}] {count}/{_amount(self.total, self.unit)}"
        else:
            line = f"{self.label} {count}"
        if self.detail:
            line += f" {mask(self.detail)}"
        self.stream.write("\r\x1b[2K" + line[:200])
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
        self.enabled = False


def _amount(value: int, unit: str) -> str:
    return human_bytes(value) if unit == "B" else str(value)


# -- output ----------------------------------------------------------------------------


def print_json(value: Any, out: TextIO, *, compact: bool = False) -> None:
    if compact:
        out.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")
    else:
        out.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO) -> None:
    """A plain left-aligned table (numbers right-aligned)."""
    text_rows = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    numeric = [
        all(_is_number(row[i]) for row in text_rows) and bool(text_rows)
        for i in range(len(headers))
    ]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(widths[i]) if numeric[i] else c.ljust(widths[i]) for i, c in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    out.write(line(list(headers)) + "\n")
    for row in text_rows:
        out.write(line(row) + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value) or "-"
    return str(value)


def _is_number(text: str) -> bool:
    return bool(re.fullmatch(r"-|-?\d+(\.\d+)?( ?[KMGT]?i?B)?", text))


# -- units -----------------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_SIZE_FACTORS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}


def parse_size(text: str) -> int:
    """``"10MB"`` -> 10_000_000, ``"1.5GiB"``, ``"512k"``, ``"2048"`` (bytes)."""
    match = _SIZE.match(text)
    factor = _SIZE_FACTORS.get(match.group(2).lower()) if match else None
    if match is None or factor is None:
        raise ValueError(f"not a size: {text!r} (use e.g. 500KB, 10MB, 1GiB or a byte count)")
    return int(float(match.group(1)) * factor)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$", re.IGNORECASE)
_DURATION_FACTORS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """``"30d"`` -> seconds; units s, m, h, d, w."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 45m, 12h, 30d, 2w)")
    return float(match.group(1)) * _DURATION_FACTORS[match.group(2).lower()]


def human_bytes(size: int | None) -> str:
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"  # pragma: no cover - loop always returns


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


def parse_ts(value: Any) -> float | None:
    """A checkpoint ``ts`` (ISO 8601 string) as a POSIX timestamp, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


#: the creation time encoded in a LangGraph (uuid6) checkpoint id, or None (one decoder:
#: the fleet health scan's)
uuid6_time = id_time
