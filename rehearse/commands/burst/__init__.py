"""Demo 2: its scale sequence (`python -m rehearse burst`) and its checks alone (`verify burst`).

Two faces, what rehearse.cli reads (each docstring is the command's help):
  command        burst: its options, its inputs, its collector and analysis
  verify         verify burst: a second collector of burst's preconditions, burst's analysis

and the concerns both share:
  kinds          what the lab deploys, the event kinds and the check names
  settings       the command line and the run's settings
  reading        reading the cluster: the summaries recorded, and Cluster (collect)
  preconditions  the preconditions collected, and the checks that judge them (pure)
  capacity       the NodePool and the capacity arithmetic (pure)
  switching      switching scenarios through rehearse.lab.switch (collect)
  collect        burst's collector: the scenarios and the scale sequence of each
  changes        what changed between two readings of the consolidation watch (pure)
  analyse        each scenario's events read once, its checks and measurements (pure)
  scalein        a scale-in judged: against the forecast and the scenario's rule (pure)
  watch          the consolidation watch's answer (pure)
  report         report.md and report.json (pure)
"""
