"""Results a reader takes in at a glance: one generated README.md per results folder.

``python -m mathagent report RESULTS_DIR`` (or :func:`write_report`) writes the folder's
README.md from its hand-written ``experiment.yaml`` (:mod:`.spec`: the question, arms,
settings and a few sentences that cite computed values by name) and its run folders, as
``mathagent.experiment.layout`` lays them out (:mod:`.stats`: every number on the page).
``--check`` writes nothing and exits 1 where the committed page differs, so a page can never
drift from its runs (``tests/test_report.py`` checks every folder under ``results/``).
"""

from mathagent.report.commands import report_command, report_parser
from mathagent.report.page import MAX_WORDS, StaleReport, build, write_report
from mathagent.report.spec import Experiment, ReportError, read_spec
from mathagent.report.stats import progress

__all__ = ["MAX_WORDS", "Experiment", "ReportError", "StaleReport", "build", "progress",
           "read_spec", "report_command", "report_parser", "write_report"]
