"""verl's attention settings: filled at load time for the machine, checked in the preflight.

verl defaults to ``flash_attention_2`` and Trinity to removing padding, both of which need the
flash-attn package; :func:`choose_attention` fills what a YAML leaves unset when flash-attn is
missing, and :func:`check_attention` reports settings that need it. With the speed lever
``MATHAGENT_VARLEN_ATTN=1`` (:mod:`mathagent.compat`, ``transformers-varlen-attention``) the
choice without flash-attn is mathagent's own variable-length attention with padding removed,
instead of ``sdpa`` over padded micro-batches.
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any

from mathagent.compat import VARLEN_ATTN_ENV, VARLEN_ATTN_NAME, varlen_attention_misfit
from mathagent.launch.config import ABSENT, _get_dotted, _set_dotted

if TYPE_CHECKING:
    from mathagent.launch.preflight import Preflight


#: verl's attention settings. verl 0.8.0 defaults to ``flash_attention_2`` and Trinity to
#: ``use_remove_padding: true``; both need the flash-attn package, which has no wheel.
ATTN_KEY = "trainer.trainer_config.model.override_config.attn_implementation"
REMOVE_PADDING_KEY = "trainer.use_remove_padding"


def flash_attn_available() -> bool:
    """Whether the flash-attn package is importable here (it has no wheel on PyPI)."""
    return importlib.util.find_spec("flash_attn") is not None


def choose_attention(raw: dict, have_flash_attn: bool | None = None) -> list[str]:
    """Fill verl's attention settings the YAML leaves unset; return notes saying what was chosen.

    With flash-attn importable verl's defaults stay (``flash_attention_2``, remove padding);
    without it the run uses PyTorch's ``sdpa`` and keeps padding, which work on any GPU, or,
    with ``MATHAGENT_VARLEN_ATTN=1``, mathagent's variable-length attention with padding
    removed. Padding is removed only where the attention is that one. Settings the YAML gives
    are never changed (the preflight reports a conflict instead).
    """
    have = flash_attn_available() if have_flash_attn is None else have_flash_attn
    if have:
        return []
    lever = os.environ.get(VARLEN_ATTN_ENV) == "1"
    why = f"flash-attn is not installed and {VARLEN_ATTN_ENV}=1" if lever \
        else "flash-attn is not installed"
    notes = []
    attn = _get_dotted(raw, ATTN_KEY)
    if attn is ABSENT:
        attn = VARLEN_ATTN_NAME if lever else "sdpa"
        _set_dotted(raw, ATTN_KEY, attn)
        notes.append(f"`{ATTN_KEY}` not set and {why}: using {attn!r}")
    if _get_dotted(raw, REMOVE_PADDING_KEY) is ABSENT:
        remove = attn == VARLEN_ATTN_NAME
        _set_dotted(raw, REMOVE_PADDING_KEY, remove)
        notes.append(f"`{REMOVE_PADDING_KEY}` not set and {why}: using {remove!r}")
    return notes


def check_attention(config: Any, result: Preflight, dry_run: bool) -> None:
    """verl settings that need flash-attn, against whether flash-attn is importable."""
    verl_config = _flatten_plain(getattr(config.trainer, "trainer_config", None) or {})
    override = _get_dotted(verl_config, "model.override_config.attn_implementation")
    if override == VARLEN_ATTN_NAME:
        _check_varlen(config, result)
        return
    asks = []
    if override in (ABSENT, None, "flash_attention_2"):
        shown = "flash_attention_2 (verl's default)" if override in (ABSENT, None) else override
        asks.append(f"`{ATTN_KEY}` is {shown}")
    if config.trainer.use_remove_padding:
        asks.append(f"`{REMOVE_PADDING_KEY}` is true")
    if not asks:
        result.passed.append("attention: sdpa without padding removal (needs no flash-attn)")
        return
    need = "; ".join(asks)
    if flash_attn_available():
        result.passed.append(f"flash-attn importable ({need})")
    elif dry_run:
        result.requirements.append(f"flash-attn importable ({need}); or set "
                                   f"{ATTN_KEY}=sdpa {REMOVE_PADDING_KEY}=false")
    else:
        result.problems.append(f"{need}, which needs the flash-attn package, and it is not "
                               f"installed (it has no wheel); set {ATTN_KEY}=sdpa and "
                               f"{REMOVE_PADDING_KEY}=false")


def _check_varlen(config: Any, result: Preflight) -> None:
    """The lever's attention: registered in every process of the run only with the lever on,
    and without verl's exchange between GPUs around flash-attention that Ulysses sequence
    parallelism needs."""
    why = varlen_attention_misfit()
    sp = config.trainer.ulysses_sequence_parallel_size
    if why is None and sp > 1:
        why = f"it does not split sequences over GPUs (trainer.ulysses_sequence_parallel_size {sp})"
    if why is not None:
        result.problems.append(f"`{ATTN_KEY}` is {VARLEN_ATTN_NAME!r}, but {why}")
        return
    padding = "removed" if config.trainer.use_remove_padding else "kept"
    result.passed.append(f"attention: {VARLEN_ATTN_NAME} ({VARLEN_ATTN_ENV}=1), padding "
                         f"{padding} (needs no flash-attn)")


def _flatten_plain(obj: Any) -> Any:
    """Dataclasses and OmegaConf nodes as plain dicts (for :func:`_get_dotted`)."""
    if hasattr(obj, "__dataclass_fields__"):
        return {k: _flatten_plain(getattr(obj, k)) for k in obj.__dataclass_fields__}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(obj, DictConfig):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:
        pass
    if isinstance(obj, dict):
        return {k: _flatten_plain(v) for k, v in obj.items()}
    return obj
