"""Task selectors: Trinity-RFT's own, a standalone driver for them, and BOTS with full state.

RL fine-tuning spends its compute on whatever tasks the *selector* hands the explorer. A
selector answers two calls per training step: ``get_indices(B)`` (which ``B`` tasks next) and
``feedback(indices, values)`` (the observed pass rate of each task's rollout group). This
package gives three things around that interface: a driver for Trinity's selectors,
:class:`BOTSSelector` (``selector_type: mathagent.selectors.BOTSSelector``) and the feedback
operator :class:`RolloutPassRateCalculator` (``name:
mathagent.selectors.RolloutPassRateCalculator``). Trinity-RFT resolves both dotted paths by
importing this package.

* ``capabilities``: the one table of selector names, kwargs, feature columns and feedback;
* ``features``: feature columns read and validated, the data source Trinity's selectors read;
* ``checks``: a selector's name, feature keys and kwargs checked before anything is built;
* ``bots``: :class:`BOTSSelector`, BOTS with a complete, resumable state (the model);
* ``state``: a Trinity selector's complete state, saved and restored;
* ``trinity``: :func:`make_selector` and :class:`SelectorDriver`, Trinity's selectors driven;
* ``operator``: :class:`RolloutPassRateCalculator`, the per-rollout feedback operator.
"""

from mathagent.selectors.bots import BOTSSelector
from mathagent.selectors.capabilities import (
    BOTS_EXTRA_KWARGS,
    BOTS_PATH,
    DIFFICULTY_KWARGS,
    FEATURE_COUNT,
    FEEDBACK_SELECTORS,
    OPERATOR_PATH,
    SELECTOR_KWARGS,
    SELECTOR_NAMES,
    TRINITY_SELECTORS,
    SelectorConfigError,
    canonical_name,
    reads_features,
    uses_feedback,
)
from mathagent.selectors.checks import check_selector_settings
from mathagent.selectors.features import DataSource, TaskColumns, read_features
from mathagent.selectors.operator import RolloutPassRateCalculator
from mathagent.selectors.state import (
    FULL_STATE_KEY,
    FULL_STATE_VERSION,
    load_selector_state,
    selector_state,
)
from mathagent.selectors.trinity import SelectorDriver, make_selector, trace_selectors

__all__ = [
    "BOTSSelector",
    "BOTS_EXTRA_KWARGS",
    "BOTS_PATH",
    "DIFFICULTY_KWARGS",
    "DataSource",
    "FEATURE_COUNT",
    "FEEDBACK_SELECTORS",
    "FULL_STATE_KEY",
    "FULL_STATE_VERSION",
    "OPERATOR_PATH",
    "RolloutPassRateCalculator",
    "SELECTOR_KWARGS",
    "SELECTOR_NAMES",
    "SelectorConfigError",
    "SelectorDriver",
    "TRINITY_SELECTORS",
    "TaskColumns",
    "canonical_name",
    "check_selector_settings",
    "load_selector_state",
    "make_selector",
    "read_features",
    "reads_features",
    "selector_state",
    "trace_selectors",
    "uses_feedback",
]
