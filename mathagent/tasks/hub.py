"""Hugging Face hub access: optional, quick to give up, and never needed when a file is given.

A copy in the local hub cache is used without a network call; an unreachable hub (or
``HF_HUB_OFFLINE=1``) is one :class:`HubUnavailable` line saying what to pass instead.
"""

from __future__ import annotations

import os
from pathlib import Path


class HubUnavailable(RuntimeError):
    """The Hugging Face hub could not be reached; the message says what to pass instead."""


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for no hub access at all."""
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() not in ("", "0", "false")


def probe_hub(api_path: str, timeout: float, endpoint: str | None = None) -> int | None:
    """The HTTP status the hub answers ``HEAD {endpoint}/api/{api_path}`` with (200, or the
    error code such as 404/401), or None when it does not answer within ``timeout`` s.

    ``huggingface_hub`` retries a failed lookup with back-off (about 25 s in all) before
    it gives up; one quick request first keeps the unreachable case short. ``endpoint``
    defaults to ``HF_ENDPOINT`` or the public hub.
    """
    import urllib.error
    import urllib.request

    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    request = urllib.request.Request(f"{endpoint.rstrip('/')}/api/{api_path}", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:  # the hub answered
        return int(exc.code)
    except (OSError, ValueError):
        return None


def download_from_hub(repo_id: str, filename: str | None = None, *, timeout: float = 10.0,
                      endpoint: str | None = None, what_instead: str = "--input PATH") -> Path:
    """Fetch ``filename`` (or a snapshot of the repo's data files) from a hub dataset repo.

    A copy already in the local hub cache is used without any network call. Otherwise the
    hub gets ``timeout`` seconds to answer; unreachable (or ``HF_HUB_OFFLINE=1``), this
    raises :class:`HubUnavailable` with one line naming ``what_instead``.
    """
    target = f"{repo_id}/{filename}" if filename else repo_id
    try:
        import huggingface_hub as hub
        from huggingface_hub import constants

        if filename is not None:
            cached = hub.try_to_load_from_cache(repo_id, filename, repo_type="dataset")
            if isinstance(cached, str) and Path(cached).is_file():
                return Path(cached)
        if constants.HF_HUB_OFFLINE:
            raise OSError("offline mode (HF_HUB_OFFLINE is set) and no cached copy")
        endpoint = endpoint or constants.ENDPOINT
        if probe_hub(f"datasets/{repo_id}", timeout, endpoint) is None:
            # an HTTP error means the hub answered: the download reports it precisely
            raise OSError(f"the hub at {endpoint} did not answer within {timeout:g} s")
        if filename is not None:
            return Path(hub.hf_hub_download(repo_id, filename, repo_type="dataset",
                                            etag_timeout=timeout, endpoint=endpoint))
        return Path(hub.snapshot_download(repo_id, repo_type="dataset", etag_timeout=timeout,
                                          endpoint=endpoint,
                                          allow_patterns=["*.parquet", "*.jsonl"]))
    except Exception as exc:  # any hub failure becomes one actionable line
        reason = " ".join(str(exc).split()).split(". ")[0][:200] or "no details"
        raise HubUnavailable(f"could not fetch {target} from the Hugging Face hub "
                             f"({type(exc).__name__}: {reason}); download it where the hub "
                             f"is reachable and pass {what_instead}") from exc
