"""On the GPU machine: check that every module the GPU runs import works there."""

import datasets
import gguf  # noqa: F401 - transformers needs it to read the GGUF file
import numpy as np

from mathagent import grpo, judge, rollouts, selectors, tasks  # noqa: F401

train = tasks.load_taskset("data/arithmetic", split="train")
print("taskset", len(train), "datasets", datasets.__version__)
print("judge", judge.score("3 + 4 = 7", "#### 7", lenient=True))
# stand-in features (this check only) so every selector can be built
tiny = datasets.Dataset.from_dict({
    "question": ["q"] * 8, "answer": ["#### 1"] * 8,
    "w": np.linspace(0, 0.5, 8), "s": np.linspace(0.2, 0.9, 8)})
for name in ("random", "offline_easy2hard", "difficulty_based", "bots"):
    keys = None if name == "random" else ["w", "s"]
    sel = selectors.make_selector(name, tiny, feature_keys=keys, seed=0)
    idx = sel.get_indices(4)
    sel.feedback(idx, [0.5] * 4)
    print("selector", name, idx)
