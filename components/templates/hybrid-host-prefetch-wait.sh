# The pulls end before nodeadm init restarts containerd. One that failed does not stop the join:
# the kubelet pulls the image when its pod starts, as it would have without the prefetch. One
# that hangs is stopped {{ prefetch_reserve_seconds }} s before the join deadline, which is left
# to init's tries.
PREFETCH_UNTIL=$((JOIN_DEADLINE - {{ prefetch_reserve_seconds }}))
# Asks the shell's own job table, not the pid, which another process may have once it ended.
prefetch_running() {
  local pid
  for pid in $(jobs -rp); do [ "$pid" = "$PREFETCH_PID" ] && return 0; done
  return 1
}
while prefetch_running && [ "$(date +%s)" -lt "$PREFETCH_UNTIL" ]; do
  sleep 1
done
stop_prefetch() {
  local waited=0
  kill -TERM -- "-$PREFETCH_PID" 2>/dev/null || true
  while kill -0 -- "-$PREFETCH_PID" 2>/dev/null && [ "$waited" -lt 10 ]; do
    sleep 1
    waited=$((waited + 1))
  done
  kill -KILL -- "-$PREFETCH_PID" 2>/dev/null || true
  wait "$PREFETCH_PID" 2>/dev/null || true
}
not_prefetched() {
  local image
  for image in "${PREFETCH_IMAGES[@]}"; do
    grep -qxF "$image" "$PREFETCHED" || echo "$image"
  done | paste -sd ' '
}
if prefetch_running; then
  stop_prefetch
  PREFETCH_MISSING=$(not_prefetched)
  log "stopped the image pulls {{ prefetch_reserve_seconds }} s before the join deadline, leaving that time to nodeadm init; not prefetched: ${PREFETCH_MISSING:-none} (the kubelet pulls them when their pods start)"
elif wait "$PREFETCH_PID"; then
  log "prefetched into containerd: ${PREFETCH_IMAGES[*]}"
else
  log "could not prefetch every image (${PREFETCH_IMAGES[*]}): the kubelet pulls what is missing when its pod starts"
fi
rm -f "$PREFETCHED"
