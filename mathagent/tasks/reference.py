"""The train and eval tasksets the reference configs read: prepared ones, or the samples.

``prepare-data`` and ``prepare-aime`` write the real ones under ``data/``; where they have
not run, the small raw samples in ``data/samples/`` are converted the same way instead.
"""

from __future__ import annotations

from pathlib import Path

from mathagent import paths
from mathagent.tasks.aime import prepare_aime
from mathagent.tasks.guru import prepare_guru


def reference_tasksets(work: str | Path) -> tuple[Path, Path, str]:
    """``(train folder, eval folder, what they are)`` for the reference configs.

    The prepared guru math and AIME-24 tasksets under ``data/`` when both exist (``prepare-data``
    and ``prepare-aime`` wrote them); otherwise the small raw samples in ``data/samples/``
    converted into ``work`` the same way, a stand-in that lets the configs load and check.
    """
    if (paths.GURU_DIR / "train.parquet").is_file() and \
            (paths.AIME24_DIR / "test.parquet").is_file():
        return paths.GURU_DIR, paths.AIME24_DIR, "the prepared guru math and AIME-24 tasksets"
    train, evals = Path(work) / "guru_math", Path(work) / "aime24"
    prepare_guru(paths.SAMPLES_DIR / "guru_raw.jsonl", out_dir=train)
    prepare_aime(paths.SAMPLES_DIR / "aime_style.jsonl", out_dir=evals)
    return train, evals, "the raw samples of data/samples converted (prepare-data not run here)"
