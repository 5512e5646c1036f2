# GPU: the NVIDIA driver and container toolkit packages, before the join. Neither needs the
# cluster or nodeadm init, and installed now the driver is in when the device plugin's pod first
# starts (it would otherwise exit and back off until the driver arrived). The package lists were
# refreshed above; the toolkit's repository is new, so it is refreshed once more.
log "installing the NVIDIA driver and container toolkit"
retry 5 apt-get install -y --no-install-recommends ubuntu-drivers-common gnupg

# ubuntu-drivers install --gpgpu installs the headless driver of the branch it picks
# (nvidia-headless-no-dkms-<branch>, or its -open variant) and that branch's kernel modules, but
# not nvidia-utils-<branch>, which holds nvidia-smi (ubuntu-drivers-common install_gpgpu; Ubuntu's
# nvidia-graphics-drivers-<branch> packages): without it the check after the join finds no
# nvidia-smi and reboots the host every time. The utilities of the installed branch are added;
# no driver installed at all (no NVIDIA device found, which ubuntu-drivers reports with status 0)
# stops here.
install_nvidia_driver() {
  local headless branch
  retry 3 ubuntu-drivers install --gpgpu
  headless=$(dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' 'nvidia-headless-no-dkms-*' 2>/dev/null |
    awk '$1 == "ii" { print $2 }' || true)
  if [[ ! $headless =~ ^nvidia-headless-no-dkms-([0-9]+(-server)?)(-open)?$ ]]; then
    log "expected one NVIDIA driver branch installed by ubuntu-drivers, found: ${headless:-none}"
    return 1
  fi
  branch=${BASH_REMATCH[1]}
  log "NVIDIA driver branch $branch: installing nvidia-utils-$branch (nvidia-smi)"
  retry 5 apt-get install -y --no-install-recommends "nvidia-utils-$branch"
}
install_nvidia_driver

retry 5 curl -fsSL -o /tmp/nvidia-container-toolkit.gpg https://nvidia.github.io/libnvidia-container/gpgkey
gpg --dearmor --yes -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg /tmp/nvidia-container-toolkit.gpg
retry 5 curl -fsSL -o /tmp/nvidia-container-toolkit.list https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list
sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#g' \
  /tmp/nvidia-container-toolkit.list > /etc/apt/sources.list.d/nvidia-container-toolkit.list
retry 5 apt-get update
retry 5 apt-get install -y nvidia-container-toolkit
