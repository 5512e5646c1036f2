# The pulls end before nodeadm init restarts containerd. One that failed does not stop the join:
# the kubelet pulls the image when its pod starts, as it would have without the prefetch.
if wait "$PREFETCH_PID"; then
  log "prefetched into containerd: ${PREFETCH_IMAGES[*]}"
else
  log "could not prefetch every image (${PREFETCH_IMAGES[*]}): the kubelet pulls what is missing when its pod starts"
fi
