"""Endpoint settings: where a model is served, how to sample from it, and whether it answers."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mathagent.serving.errors import EndpointError
from mathagent.serving.model_file import BUNDLED_ALIAS

ENV_BASE_URL = "MATHAGENT_BASE_URL"
ENV_API_KEY = "MATHAGENT_API_KEY"
ENV_MODEL = "MATHAGENT_MODEL"
LOCAL_API_KEY = "EMPTY"


@dataclass
class ModelSettings:
    """Where a model is served and how to sample from it.

    ``base_url`` None means "no endpoint chosen": commands then start the bundled model.
    ``temperature``, ``max_tokens`` and ``seed`` go into every chat-completions request
    (None leaves the server's default). ``request_timeout`` bounds one HTTP request;
    ``max_retries`` is the OpenAI client's retry count for transient HTTP errors.
    """

    base_url: str | None = None
    api_key: str = LOCAL_API_KEY
    model: str = BUNDLED_ALIAS
    temperature: float | None = 1.0
    max_tokens: int | None = 512
    seed: int | None = None
    request_timeout: float = 600.0
    max_retries: int = 2
    extra_body: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, **overrides: Any) -> ModelSettings:
        """Settings from ``MATHAGENT_BASE_URL/API_KEY/MODEL``; ``overrides`` win when not None."""
        env = {"base_url": os.environ.get(ENV_BASE_URL) or None,
               "api_key": os.environ.get(ENV_API_KEY) or LOCAL_API_KEY,
               "model": os.environ.get(ENV_MODEL) or BUNDLED_ALIAS}
        env.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**env)

    def with_endpoint(self, base_url: str, model: str | None = None) -> ModelSettings:
        """A copy pointing at another endpoint (same decoding settings)."""
        return replace(self, base_url=base_url, model=model or self.model)

    def generate_kwargs(self, seed: int | None = None) -> dict[str, Any]:
        """The per-request sampling arguments of the chat-completions API."""
        kwargs: dict[str, Any] = {}
        if self.temperature is not None:
            kwargs["temperature"] = float(self.temperature)
        if self.max_tokens is not None:
            kwargs["max_tokens"] = int(self.max_tokens)
        seed = self.seed if seed is None else seed
        if seed is not None:
            kwargs["seed"] = int(seed)
        if self.extra_body:
            kwargs["extra_body"] = dict(self.extra_body)
        return kwargs

    def describe(self) -> dict[str, Any]:
        """The settings as a JSON-able dict for provenance files (the API key is left out)."""
        out = asdict(self)
        out.pop("api_key")
        return out


def check_endpoint(settings: ModelSettings, timeout: float = 10.0) -> list[str]:
    """Ask ``GET {base_url}/models``; return the served model ids or raise :class:`EndpointError`.

    Run before a long batch so that a wrong URL, a server that is down or a wrong key fails
    in seconds with a message naming the URL, instead of as thousands of failed rollouts.
    """
    if not settings.base_url:
        raise EndpointError(f"no endpoint: set {ENV_BASE_URL} (or --base-url), or let the "
                            "command start the bundled model")
    url = settings.base_url.rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {settings.api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            body = json.loads(reply.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        hint = " (check MATHAGENT_API_KEY)" if exc.code in (401, 403) else ""
        raise EndpointError(f"endpoint {settings.base_url} answered HTTP {exc.code} to "
                            f"GET /models{hint}") from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EndpointError(f"cannot reach the OpenAI-compatible endpoint {settings.base_url}: "
                            f"{reason}. Is the server running? Set {ENV_BASE_URL} or "
                            "--base-url to a live server, or unset it to start the bundled "
                            "model.") from exc
    except json.JSONDecodeError as exc:
        raise EndpointError(f"endpoint {settings.base_url} did not answer GET /models with "
                            "JSON: is this an OpenAI-compatible API (URL ending in /v1)?") from exc
    return [str(m.get("id")) for m in body.get("data", []) if isinstance(m, dict)]


def check_served_model(settings: ModelSettings, setting: str = "model") -> list[str]:
    """:func:`check_endpoint`, then check that ``settings.model`` is among the served ids.

    Returns the served ids; raises :class:`EndpointError` (naming ``setting``, where the
    model name came from) when the endpoint does not serve that model, since every request
    would then fail. An endpoint that lists no models at all is not second-guessed.
    """
    served = check_endpoint(settings)
    if served and settings.model not in served:
        raise EndpointError(f"{setting} {settings.model!r}: the endpoint {settings.base_url} "
                            f"does not serve it; it serves: {', '.join(served)}")
    return served
