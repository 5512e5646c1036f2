"""Which pods the ReplicaSet controller deletes when a Deployment scales in, in order, each with
the rule that decided it — and where no rule decides, which the controller picks at random.

The model is the kube-controller-manager's own (docs/scale-in.md#the-replicaset-controllers-ranking): the ReplicaSet's active pods
(not Succeeded or Failed, not being deleted) are sorted by ActivePodsWithRanks.Less and the
first `active - replicas` are deleted, all at once. The rules, first difference decides:
1 not scheduled, 2 phase Pending < Unknown < Running, 3 not Ready, 4 lower
controller.kubernetes.io/pod-deletion-cost, 5 more pods of the Deployment on the same node,
6 Ready more recently, 7 more container restarts (then more sidecar restarts), 8 created more
recently. Rules 6 and 8 compare ages in log2 buckets of nanoseconds; within a bucket the lower
UID goes first. Each deleted pod is explained against the first pod kept; where every rule ties
(or the rules order pods in a circle, which leaves them to the order the controller lists them
in: docs/scale-in.md#ties-and-the-controllers-clock), the forecast says the choice is random.
Live, --replicas is the Deployment's new size; during a rollout the Deployment controller
shares it among the active ReplicaSets, and each is forecast
(docs/scale-in.md#a-rollout-in-progress-the-deployment-controllers-split).

Offline, from files:
  kubectl -n demo-burst get pods -o json > pods.json
  python -m rehearse predict --pods pods.json --replicas 12 [--now 2025-06-01T12:03:00Z]
Live, from the cluster (the Deployment's current ReplicaSet; ranks count the pods of all its
ReplicaSets):
  python -m rehearse predict --deployment burst --namespace demo-burst --replicas 12

It reads, never writes: no run folder, no change to the cluster. Exit 0 with the forecast;
exit 2, with one line, on input it cannot use."""

# The command's face, what rehearse.cli reads (a tool: it prints and keeps no run folder, rehearse.run.command): its
# docstring is its --help description; the work is in collect (and analyse).
from rehearse.commands.predict.collect import TITLE, add_arguments, main

__all__ = ["TITLE", "add_arguments", "main"]
