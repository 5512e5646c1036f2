"""eks-hybrid-lab: the AWS environment for rehearsing the EKS Hybrid Nodes demos."""

from stacks.config import read_pulumi_config
from stacks.exports import export_lab
from stacks.layers import build_lab

# Config is read and validated in full before the first resource is registered.
lab = build_lab(read_pulumi_config())
export_lab(lab)
