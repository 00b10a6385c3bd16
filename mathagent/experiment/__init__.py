"""Reproduce an experiment with one command: ``python -m mathagent experiment SPEC.yaml``.

A spec (:mod:`mathagent.results.spec`, which the report reads too) names the arms (a Trinity
config each), the seeds, overrides shared by every run, the policy and the output folder. The
command runs every (arm, seed) the folder does not yet hold finished, lays each out there and
writes the report.

- :mod:`~mathagent.experiment.schedule`: each run's steps and evaluations.
- :mod:`~mathagent.experiment.plan`: which runs are done, to do or partial; a partial run's
  files moved aside; one experiment process per work folder.
- :mod:`~mathagent.experiment.runner`: one run: its Ray head, ``train``, the GPU monitor, the
  end.
- :mod:`~mathagent.experiment.progress`: a run's progress from its log and event files.
- :mod:`~mathagent.experiment.layout`: a finished run's folder in the results, and the folder's
  timing tables.
- :mod:`~mathagent.experiment.buffer`: samples and per-step tables from a run's experience
  buffer.
- :mod:`~mathagent.experiment.estimate`: the GPU time of the runs to do.
- :mod:`~mathagent.experiment.commands`: the ``experiment`` command.
"""
