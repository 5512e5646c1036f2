# GPU: the NVIDIA container runtime. nodeadm init wrote containerd's configuration, so the
# runtime is configured only now, after it; configuring it earlier is overwritten. This takes
# seconds, and the device plugin's pod cannot start before the node is Ready (Cilium's agent
# running on it), so the plugin finds the runtime in place.
nvidia-ctk runtime configure --runtime=containerd --set-as-default
systemctl restart containerd
# The driver's kernel module loads without a reboot when it matches the running kernel; when it
# does not, reboot once (user data does not run again; kubelet and containerd come back).
if ! nvidia-smi; then
  log "nvidia-smi failed: rebooting to load the NVIDIA kernel module"
  systemctl reboot
fi
