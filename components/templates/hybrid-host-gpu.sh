# GPU: the NVIDIA driver and container toolkit. nodeadm init wrote containerd's configuration,
# so the NVIDIA runtime is configured only now, after it; configuring it earlier is overwritten.
log "installing the NVIDIA driver and container toolkit"
export DEBIAN_FRONTEND=noninteractive
retry 5 apt-get update
retry 5 apt-get install -y --no-install-recommends ubuntu-drivers-common gnupg
retry 3 ubuntu-drivers install --gpgpu
retry 5 curl -fsSL -o /tmp/nvidia-container-toolkit.gpg https://nvidia.github.io/libnvidia-container/gpgkey
gpg --dearmor --yes -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg /tmp/nvidia-container-toolkit.gpg
retry 5 curl -fsSL -o /tmp/nvidia-container-toolkit.list https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list
sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#g' \
  /tmp/nvidia-container-toolkit.list > /etc/apt/sources.list.d/nvidia-container-toolkit.list
retry 5 apt-get update
retry 5 apt-get install -y nvidia-container-toolkit
nvidia-ctk runtime configure --runtime=containerd --set-as-default
systemctl restart containerd
# The driver's kernel module loads without a reboot when it matches the running kernel; when it
# does not, reboot once (user data does not run again; kubelet and containerd come back).
if ! nvidia-smi; then
  log "nvidia-smi failed: rebooting to load the NVIDIA kernel module"
  systemctl reboot
fi
