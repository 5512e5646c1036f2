#!/bin/bash
# A hybrid nodes gateway node forwards traffic between the VPC and hybrid pods: its primary
# network interface must accept packets that are not addressed to it (source/dest check off)
# and its kernel must forward them. Runs at boot, before the node joins the cluster.
set -euo pipefail

metadata_token=$(curl -fsS -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 300" \
  http://169.254.169.254/latest/api/token)
imds() {
  curl -fsS -H "X-aws-ec2-metadata-token: $metadata_token" "http://169.254.169.254/latest/meta-data/$1"
}
region=$(imds placement/region)

# The interface at device index 0. (ModifyInstanceAttribute would fail on an instance with
# several interfaces, which the VPC CNI attaches.)
primary_eni=""
for mac in $(imds network/interfaces/macs/); do
  if [ "$(imds "network/interfaces/macs/${mac}device-number")" = "0" ]; then
    primary_eni=$(imds "network/interfaces/macs/${mac}interface-id")
  fi
done
if [ -z "$primary_eni" ]; then
  echo "eks-hybrid-lab: no network interface at device index 0" >&2
  exit 1
fi

# Retried: the node role's policy may take a moment to be honoured after the role is created.
attempt=1
until aws ec2 modify-network-interface-attribute --region "$region" \
    --network-interface-id "$primary_eni" --no-source-dest-check; do
  if [ "$attempt" -ge 8 ]; then
    echo "eks-hybrid-lab: could not turn off source/dest check on $primary_eni" >&2
    exit 1
  fi
  sleep $((attempt * 10))
  attempt=$((attempt + 1))
done

sysctl -w net.ipv4.ip_forward=1
echo "net.ipv4.ip_forward = 1" > /etc/sysctl.d/90-eks-hybrid-gateway.conf
