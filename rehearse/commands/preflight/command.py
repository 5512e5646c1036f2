"""The pre-check, kept as a run: `python -m ops.preflight`'s read-only checks (Describe, List and
Get calls only) for the stack's ``Pulumi.<stack>.yaml``, recorded in a run folder so the
rehearsal's summary can say when it last passed. The run itself also proves the stack's outputs
and the cluster can be reached, as every rehearse command does first."""

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description; the work is in collect (and analyse).
from rehearse.commands.preflight.collect import TITLE, add_arguments, check_inputs, collect, analyse

__all__ = ["TITLE", "add_arguments", "check_inputs", "collect", "analyse"]
