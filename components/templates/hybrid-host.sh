#!/bin/bash
# Joins this machine to EKS cluster {{ cluster_name }} as a hybrid node, the way an on-prem server
# joins: nodeadm with SSM hybrid activation credentials. Rendered by
# components/hybrid_user_data.py; cloud-init runs it once, as root, at first boot.
set -euo pipefail
shopt -s lastpipe  # init_node reads nodeadm's output in this shell
# The activation code is a credential: it goes only into the root-only NodeConfig. Every line
# printed here (nodeadm logs the `amazon-ssm-agent -register -code ... -id ...` it retries)
# passes redact_output, which takes the code out before the root-only join log and the id too
# before cloud-init's output (its log and the EC2 console). docs/hybrid-nodes.md#the-join-log.
JOIN_LOG=/var/log/eks-hybrid-lab-join.log
ACTIVATION_CODE={{ activation_code }}
ACTIVATION_ID={{ activation_id }}
# The code as printed, and as nodeadm's JSON log escapes it (zap: backslash, quote, controls);
# nodeadm refuses a code with a line break (internal/node/hybrid/validator.go).
code_forms() {
  local json=${ACTIVATION_CODE//\\/\\\\}
  json=${json//\"/\\\"}
  json=${json//$'\t'/\\t}
  json=${json//$'\r'/\\r}
  CODE_FORMS=()
  if [ -n "$ACTIVATION_CODE" ]; then CODE_FORMS=("$json" "$ACTIVATION_CODE"); fi
}
redact_output() {
  local line form
  code_forms
  while IFS= read -r line || [ -n "$line" ]; do
    for form in "${CODE_FORMS[@]}"; do line=${line//"$form"/'[activation code]'}; done
    printf '%s\n' "$line" >&3 || true  # a full disk does not stop the console's copy
    if [ -n "$ACTIVATION_ID" ]; then line=${line//"$ACTIVATION_ID"/'[activation id]'}; fi
    printf '%s\n' "$line"
  done
}
(umask 077 && : >> "$JOIN_LOG")
chmod 0600 "$JOIN_LOG"
exec > >(redact_output 3>> "$JOIN_LOG") 2>&1
STARTED=$(date +%s)

CLUSTER_NAME='{{ cluster_name }}'
KUBERNETES_VERSION='{{ kubernetes_version }}'
# A pinned release (components/nodeadm.py): what joins does not change with the day of the deploy.
NODEADM_URL='{{ nodeadm_url }}'
NODEADM_BIN=/usr/local/bin/nodeadm
NODE_CONFIG=/etc/eks-hybrid-lab/nodeconfig.yaml

log() { echo "[eks-hybrid-lab] $(date -u +%FT%TZ) $*"; }

# retry ATTEMPTS COMMAND...: first boot races apt's own timers for the dpkg lock, and a new IAM
# role or access entry takes up to a minute to be honoured; both pass on a later try.
retry() {
  local attempts=$1 n=1
  shift
  until "$@"; do
    if [ "$n" -ge "$attempts" ]; then
      log "giving up after $n attempts: $*"
      return 1
    fi
    log "attempt $n failed, retrying: $*"
    sleep $((n * 15))
    n=$((n + 1))
  done
}

# A real server has no instance metadata service. cloud-init has read the user data (it holds
# the activation code) by now; from here on neither this host nor its pods may reach IMDS, so
# the SSM agent registers as a hybrid machine (mi-...) and nothing can read the code back.
block_imds() {
  iptables -w -C OUTPUT -d 169.254.169.254/32 -j DROP 2>/dev/null ||
    iptables -w -I OUTPUT -d 169.254.169.254/32 -j DROP
  iptables -w -C FORWARD -d 169.254.169.254/32 -j DROP 2>/dev/null ||
    iptables -w -I FORWARD -d 169.254.169.254/32 -j DROP
}
block_imds
cat > /etc/systemd/system/eks-hybrid-lab-block-imds.service <<'UNIT'
[Unit]
Description=Block the EC2 instance metadata service (simulated on-prem server)
After=cloud-final.service network-online.target
Wants=network-online.target

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'iptables -w -C OUTPUT -d 169.254.169.254/32 -j DROP 2>/dev/null || iptables -w -I OUTPUT -d 169.254.169.254/32 -j DROP'
ExecStart=/bin/sh -c 'iptables -w -C FORWARD -d 169.254.169.254/32 -j DROP 2>/dev/null || iptables -w -I FORWARD -d 169.254.169.254/32 -j DROP'
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable eks-hybrid-lab-block-imds.service

# The release publishes each binary's SHA-256 beside it, as sha256sum's line for "nodeadm": a
# truncated or damaged download fails the check, and is fetched again.
fetch_nodeadm() {
  local dir status
  dir=$(mktemp -d) || return
  curl -fsSL --retry 5 --connect-timeout 10 -o "$dir/nodeadm" "$NODEADM_URL" &&
    curl -fsSL --retry 5 --connect-timeout 10 -o "$dir/nodeadm.sha256" "$NODEADM_URL.sha256" &&
    (cd "$dir" && sha256sum --check --strict nodeadm.sha256) &&
    install -m 0755 "$dir/nodeadm" "$NODEADM_BIN"
  status=$?
  rm -rf "$dir"
  return "$status"
}

log "installing nodeadm from $NODEADM_URL"
retry 10 fetch_nodeadm

# nodeadm install runs `apt install containerd` without refreshing the package lists, and
# cloud-init refreshes them only when told to (package_update): on a fresh image the install
# then fails to find containerd, or fetches files the mirror no longer has.
log "refreshing the package lists"
export DEBIAN_FRONTEND=noninteractive
retry 5 apt-get update

log "installing kubelet, containerd and the SSM agent for Kubernetes $KUBERNETES_VERSION"
retry 5 nodeadm install "$KUBERNETES_VERSION" --credential-provider ssm

{{ prefetch_start }}

{{ gpu_install }}

# The NodeConfig carries the activation code: root-only.
install -d -m 0700 /etc/eks-hybrid-lab
umask 077
cat > "$NODE_CONFIG" <<'NODECONFIG'
{{ node_config }}
NODECONFIG
umask 022
# The Node is labelled with this instance's id (its cleanup selects it). cloud-init read it
# from the datasource at boot and answers from its cache, not the metadata service (blocked
# above): `cloud-init query v1.instance_id`, documented in cloud-init's instancedata.rst.
if grep -q '@INSTANCE_ID@' "$NODE_CONFIG"; then
  INSTANCE_ID=$(cloud-init query v1.instance_id)
  if ! [[ "$INSTANCE_ID" =~ ^i-[0-9a-f]{8,17}$ ]]; then
    log "cloud-init gave no EC2 instance id ('$INSTANCE_ID'): cannot label the Node; not joining"
    exit 1
  fi
  sed -i "s/@INSTANCE_ID@/$INSTANCE_ID/" "$NODE_CONFIG"
fi

# This host boots while EKS creates the control plane (`pulumi up` does not make it wait for
# the cluster), so nodeadm init fails until the cluster is ACTIVE and this node's access entry
# and role are honoured. It is tried again until a deadline sized to the control plane's worst
# case; a later try does not register with SSM again (nodeadm skips a registered agent).
JOIN_DEADLINE=$((STARTED + {{ join_deadline_seconds }}))
{{ prefetch_wait }}

# One try of nodeadm init, its output read for the refusal no later try gets past: SSM's
# RegistrationLimitExceeded (docs/hybrid-nodes.md#the-join-log cites where it is printed).
init_node() {
  REGISTRATION_LIMIT_REACHED=0
  nodeadm init -c "file://$NODE_CONFIG" 2>&1 | read_init_output
}
read_init_output() {
  local line
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s\n' "$line"
    case $line in *RegistrationLimitExceeded*) REGISTRATION_LIMIT_REACHED=1 ;; esac
  done
}

join() {
  local n=1
  log "joining $CLUSTER_NAME (trying until $(date -u -d "@$JOIN_DEADLINE" +%FT%TZ))"
  until init_node; do
    if [ "$REGISTRATION_LIMIT_REACHED" = 1 ]; then
      log "not joining: SSM refused to register this host, activation $ACTIVATION_ID has reached its registration limit (RegistrationLimitExceeded) and no retry can pass it. Renew it with \`pulumi config set activationGeneration N+1\` (N: the current value), which replaces the activation and the hybrid hosts"
      return 1
    fi
    if [ "$(date +%s)" -ge "$JOIN_DEADLINE" ]; then
      log "giving up: EKS cluster $CLUSTER_NAME did not accept this node by $(date -u -d "@$JOIN_DEADLINE" +%FT%TZ)"
      return 1
    fi
    log "waiting for EKS cluster $CLUSTER_NAME to be ACTIVE and to accept this node (try $n failed; again in {{ join_retry_seconds }} s)"
    sleep {{ join_retry_seconds }}
    n=$((n + 1))
  done
}
join

{{ gpu_setup }}

log "done: this host is a hybrid node of $CLUSTER_NAME"
