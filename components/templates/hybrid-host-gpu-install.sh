# GPU: the NVIDIA driver and container toolkit packages, before the join. Neither needs the
# cluster or nodeadm init, and installed now the driver is in when the device plugin's pod first
# starts (it would otherwise exit and back off until the driver arrived). The package lists were
# refreshed above; the toolkit's repository is new, so it is refreshed once more.
log "installing the NVIDIA driver and container toolkit"
retry 5 apt-get install -y --no-install-recommends ubuntu-drivers-common gnupg
retry 3 ubuntu-drivers install --gpgpu
retry 5 curl -fsSL -o /tmp/nvidia-container-toolkit.gpg https://nvidia.github.io/libnvidia-container/gpgkey
gpg --dearmor --yes -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg /tmp/nvidia-container-toolkit.gpg
retry 5 curl -fsSL -o /tmp/nvidia-container-toolkit.list https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list
sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#g' \
  /tmp/nvidia-container-toolkit.list > /etc/apt/sources.list.d/nvidia-container-toolkit.list
retry 5 apt-get update
retry 5 apt-get install -y nvidia-container-toolkit
