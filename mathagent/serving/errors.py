"""The package's errors: an endpoint that cannot be used, a local server that did not start."""

from __future__ import annotations


class EndpointError(RuntimeError):
    """An OpenAI-compatible endpoint cannot be used; the message names the URL and the fix."""


class ServerStartError(RuntimeError):
    """The local model server did not come up; the message carries the end of its log."""
