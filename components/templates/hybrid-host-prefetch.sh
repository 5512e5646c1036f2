# Images this host's pods run (the GPU host's vLLM image, about 10 GB), pulled into containerd
# while the rest installs, so the pod starts without pulling. nodeadm init rewrites containerd's
# configuration and restarts it but keeps its root, /var/lib/containerd, and its snapshotter,
# overlayfs (aws/eks-hybrid internal/containerd/config.template.toml; daemon.go EnsureRunning),
# and the kubelet's CRI looks images up in namespace k8s.io. ctr does not normalize references
# as the CRI does, so they come normalized (components/hybrid_user_data.py).
PREFETCH_IMAGES=({{ prefetch_images }})
# The images pulled, for the wait to say which were not.
PREFETCHED=$(mktemp)
# ctr's progress lines would fill the join log: only its errors go there.
pull_image() { ctr -n k8s.io images pull "$1" >/dev/null; }
prefetch_images() {
  local image
  for image in "${PREFETCH_IMAGES[@]}"; do
    log "pulling $image into containerd (namespace k8s.io) while the host installs"
    retry 5 pull_image "$image" || return
    echo "$image" >> "$PREFETCHED"
    log "pulled $image"
  done
}
# nodeadm install put containerd in from apt; it is started in case nothing started it yet
# (if it cannot start, the pulls fail, and the join goes on without them).
systemctl enable --now containerd || log "containerd did not start; nodeadm init starts it"
# In a process group of its own (job control for this job only): one signal stops it and ctr.
set -m
prefetch_images &
PREFETCH_PID=$!
set +m
