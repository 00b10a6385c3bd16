"""verl's attention settings: filled at load time for the machine, checked in the preflight.

verl defaults to ``flash_attention_2`` and Trinity to removing padding, both of which need the
flash-attn package; :func:`choose_attention` fills what a YAML leaves unset when flash-attn is
missing, and :func:`check_attention` reports settings that need it.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

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
    without it the run uses PyTorch's ``sdpa`` and keeps padding, which work on any GPU.
    Settings the YAML gives are never changed (the preflight reports a conflict instead).
    """
    have = flash_attn_available() if have_flash_attn is None else have_flash_attn
    if have:
        return []
    notes = []
    for key, value in ((ATTN_KEY, "sdpa"), (REMOVE_PADDING_KEY, False)):
        if _get_dotted(raw, key) is ABSENT:
            _set_dotted(raw, key, value)
            notes.append(f"`{key}` not set and flash-attn is not installed: using {value!r}")
    return notes


def check_attention(config: Any, result: Preflight, dry_run: bool) -> None:
    """verl settings that need flash-attn, against whether flash-attn is importable."""
    verl_config = _flatten_plain(getattr(config.trainer, "trainer_config", None) or {})
    override = _get_dotted(verl_config, "model.override_config.attn_implementation")
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
