"""The demos' runbook as code: `python -m rehearse <command>` checks and measures a deployed
lab and writes a report a presenter can keep.

Each command is a **collector** that talks to Kubernetes, EC2 and Pulumi and records
timestamped observations (``events.jsonl``), and an **analyser**: pure functions from those
events to checks and numbers. A recorded run replays through its analyser
(``python -m rehearse report <folder>``), which is how the tests prove the analysis. The tools
read the stack; they change nothing Pulumi owns (the failover deletes a pod, which its
Deployment replaces).

Where things are: rehearse.cli holds the registry of commands (in a rehearsal's order) and the
parser; run/ the frame every run shares; lab/ the only code that talks to the lab; models/ the
pure models; commands/<command>/ one folder per command, its face command.py; pages/ what reads
run folders (all, summary); charts/ the drawing (rehearse.run.command says what each kind of
command provides).
"""
