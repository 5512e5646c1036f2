"""Measure the EKS Hybrid Nodes gateway's leader failover: delete the leader's pod and measure,
from the cluster's own clocks, how long traffic stopped each way and when the Lease, the VPC
routes and the VTEP config followed the new leader.

Before acting it requires a healthy baseline (at least 5 successful probes on each path each way
in the last --baseline seconds, the latest one successful) and a leader resolved exactly (Lease
holder -> node -> its one gateway pod); otherwise nothing is deleted and the run is reported as
not a measurement. After the deletion it polls the Lease, the route tables and the VTEP config
every --interval seconds until a different holder leads and every route table and the VTEP config
name it (or --timeout passes), keeps watching for --observe seconds, then reads both demo 1
probers' kubelet-timestamped logs. The figure for each direction and path is the longest
interval between two successful probes that overlaps the failover, as the gateway's own e2e test
measures it; it passes at or under --threshold seconds.
"""

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description; the work is in collect (and analyse).
from rehearse.commands.failover.collect import TITLE, OUTPUTS, add_arguments, check_inputs, collect, analyse

__all__ = ["TITLE", "OUTPUTS", "add_arguments", "check_inputs", "collect", "analyse"]
