"""The ReplicaSet controller's scale-in, as pure functions: read the pods' facts (pods), rank
them by ActivePodsWithRanks.Less (rules), and forecast which go, each with the rule that decided
it (forecast). ``rehearse predict`` reads the pods and prints the forecast; ``rehearse burst``
forecasts each scale-in with it. What they use is named here, so they import this package
rather than its modules."""

from rehearse.models.ranking.forecast import (BURST_REPLICAS, Forecast, Victim, forecast,
                                              forecast_facts, within_window)
from rehearse.models.ranking.pods import (POD_DELETION_COST, PodFacts, deletion_cost, is_active,
                                          pod_facts, ranks)
from rehearse.models.ranking.rules import PHASE_ORDINAL, RULES, Decision, decide, explain, less, log2_bucket
from rehearse.models.ranking.times import NS, datetime_ns, format_ns, kube_time_ns

__all__ = ["BURST_REPLICAS", "Forecast", "Victim", "forecast", "forecast_facts", "within_window",
           "POD_DELETION_COST", "PodFacts", "deletion_cost", "is_active", "pod_facts", "ranks",
           "PHASE_ORDINAL", "RULES", "Decision", "decide", "explain", "less", "log2_bucket",
           "NS", "datetime_ns", "format_ns", "kube_time_ns"]
