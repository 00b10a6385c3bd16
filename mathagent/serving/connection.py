"""The choice of endpoint: a given one, checked, or a named model on a local server."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

from mathagent.models import MODELS, model_file
from mathagent.serving.endpoint_settings import (
    ENV_BASE_URL,
    LOCAL_API_KEY,
    ModelSettings,
    check_served_model,
)
from mathagent.serving.errors import EndpointError
from mathagent.serving.server import LocalServer


def connect(settings: ModelSettings | None = None, setting: str = "model",
            **server_kwargs: Any) -> tuple[ModelSettings, LocalServer | None]:
    """Usable settings and the server started for them, if any (call ``server.stop()``).

    The one choice of endpoint: with ``settings.base_url`` set (or ``MATHAGENT_BASE_URL``),
    checks that the endpoint answers and serves ``settings.model``
    (:func:`check_served_model`; ``setting`` names where that name came from) and returns
    ``(settings, None)``; otherwise starts a :class:`LocalServer` for ``settings.model``, a
    name of :data:`mathagent.models.MODELS` (by default the bundled SmolLM2;
    ``server_kwargs`` go to the server), and returns settings pointing at it, with the
    decoding options kept. Any other model without an endpoint is an :class:`EndpointError`.
    Notebooks use this; scripts prefer :func:`endpoint`.
    """
    settings = settings or ModelSettings.from_env()
    if settings.base_url:
        check_served_model(settings, setting)
        return settings, None
    if settings.model not in MODELS:
        raise EndpointError(f"{setting} {settings.model!r}: a local server serves only "
                            f"{', '.join(MODELS)}; give an endpoint serving "
                            f"{settings.model!r} ({ENV_BASE_URL} or --base-url), or drop it")
    server = LocalServer(model_file(settings.model), model_alias=settings.model,
                         **server_kwargs).start()
    return replace(settings, base_url=server.base_url, api_key=LOCAL_API_KEY,
                   model=server.model_alias), server


@contextlib.contextmanager
def endpoint(settings: ModelSettings | None = None, setting: str = "model",
             **server_kwargs: Any):
    """:func:`connect` as a context manager: a started local server stops on exit."""
    settings, server = connect(settings, setting, **server_kwargs)
    try:
        yield settings
    finally:
        if server is not None:
            server.stop()
