"""The plugin's own errors: a set-up problem (no engine, missing image, program or URL, a port
taken) as one clear line, which the fixtures turn into a failed test without a traceback
(docs/architecture.md)."""

from __future__ import annotations


class GraphkeepTestingError(Exception):
    """A set-up problem of the plugin (no engine, missing image or URL): one clear line."""


class PortInUse(GraphkeepTestingError):
    """A server's port is held by a process that is not the server's own."""
