"""The leftovers audit's price table: what a leftover costs while it stays."""

from __future__ import annotations

# --- approximate costs ---------------------------------------------------------------------------
#
# Approximate on-demand list prices in USD per hour, us-east-1 (N. Virginia), read on 2026-11-29
# from stored copies of the pages named below. Most other regions cost the same or more (NAT
# gateways in Asia Pacific are about $0.059-0.062/h: ap-southeast-1 per basavytix.com/blog/
# aws-nat-gateway-pricing, ap-northeast-1 per awsi.click/en/articles/nat-gateway-cost-structure-
# avoidance), so read these as a floor for the lab's default region ap-northeast-2. Data
# processing, storage and request charges are not included.
HOURLY_USD: dict[str, float] = {
    # $0.045 per NAT gateway-hour: cloudburn.io/blog/aws-nat-gateway-pricing,
    # basavytix.com/blog/aws-nat-gateway-pricing ("These are the us-east-1 rates").
    "nat-gateway": 0.045,
    # $0.005 per public IPv4 address-hour, in use or idle, every region, since 2024-02-01:
    # doit.com/aws-public-ipv4-price-increase-the-complete-guide/ (AWS announcement:
    # aws.amazon.com/blogs/aws/new-aws-public-ipv4-address-charge-public-ip-insights/).
    "public-ipv4": 0.005,
    # $0.05 per transit gateway attachment-hour; the transit gateway itself has no hourly fee:
    # awsnegotiations.com/transit-gateway-pricing.html, c3x.dev/blog/aws-transit-gateway-cost-
    # explained/, pixlodo.com/aws-transit-gateway-costs/ ("Gateway resource is free").
    "tgw-attachment": 0.05,
    "transit-gateway": 0.0,
    # $0.10 per cluster-hour in standard support ($0.60 in extended support, which a cluster on
    # an older Kubernetes version pays): cloudburn.io/blog/amazon-eks-pricing.
    "eks-cluster": 0.10,
    # $1 per customer managed key-month, prorated hourly (730 h a month); nothing while pending
    # deletion, nothing for AWS managed keys: aws.amazon.com/kms/pricing/.
    "kms-key": 1.0 / 730,
}

#: Linux on-demand USD per hour, us-east-1, read on 2026-11-29: m5.large/m5.xlarge from
#: kindatechnical.com/aws-eks/lesson-31-understanding-eks-pricing.html, m7g.large and g5.xlarge
#: from factualminds.com/blog/amazon-ec2-on-demand-pricing-instance-families-2026/ (June 2026).
#: Any other type (the lab's m6i.large and g6.xlarge defaults included) is left unknown rather
#: than guessed.
INSTANCE_HOURLY_USD: dict[str, float] = {
    "m5.large": 0.096,
    "m5.xlarge": 0.192,
    "m7g.large": 0.0816,
    "g5.xlarge": 1.006,
}

COST_NOTE = ("Costs are approximate: on-demand list prices per hour (the lab's table, "
             "stacks/costs.py, for its region; us-east-1 where it has none), without data, storage "
             "or request charges; '?' means not known.")
