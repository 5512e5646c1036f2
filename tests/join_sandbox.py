"""A sandbox that runs a rendered join script (components/templates/hybrid-host.sh) the way
cloud-init runs user data on a host, with stand-ins for the tools it calls.

bubblewrap puts the machine's root read-only under the script and binds a scratch folder over
every path it writes (/etc, /var/log, /var/lib, /usr/local/bin, /tmp, /var/tmp, /run, /root), in
new namespaces with no network: the real /var/log and /etc of this machine are never touched,
and afterwards every file the run wrote is on the host side, in ``Run.root``, to be searched.

How cloud-init runs it (canonical/cloud-init): the user data script is written to
/var/lib/cloud/instance/scripts/part-001 with mode 0700 (cloudinit/handlers/shell_script.py) and
the raw user data to /var/lib/cloud/instance/user-data.txt with mode 0600 (cloudinit/stages.py,
_store_rawdata); cc_scripts_user runs the part (subp.runparts, capture=False) with cloud-init's
own stdout and stderr, which cloud-init points at ``| tee -a /var/log/cloud-init-output.log``
(config/cloud.cfg.d/05_logging.cfg; util.redirect_output), whose output is the journal and the
console (systemd/cloud-final.service, StandardOutput=journal+console). The runner below does the
same with umask 022 (systemd's default): what it prints is ``Run.console``.

The stand-ins (first on PATH, in /usr/local/sbin, as in cloud-init's PATH) print what the real
tools print, from their sources:

- nodeadm (aws/eks-hybrid; served by the curl stand-in and installed by the script itself):
  zap's production logger, JSON lines on stderr with ISO8601 times and the caller
  (internal/cli/logger.go); a failed command ends in ``log.Fatal("Command failed", zap.Error)``
  and exit 1 (cmd/nodeadm/main.go). ``init`` validates the code's length
  (internal/node/hybrid/validator.go), registers with SSM unless the agent is registered, running
  ``amazon-ssm-agent -register -y -region R -code C -id I`` and retrying it every 10 s for 60 s,
  each failure logged as "Command failed, retrying" with ``running command <args>: <output>
  [Err exit status 1]`` (internal/ssm/config.go registerMachine, internal/util/cmd/retry.go;
  scaled here to ``SSM_ATTEMPTS`` tries ``SSM_BACKOFF`` s apart), then fails with "eks cluster is
  not active" for the first ``init_failures`` tries (internal/node/hybrid/configenricher.go).
- amazon-ssm-agent (aws/amazon-ssm-agent agent/agent_parser.go): "Registration failed due to
  error registering the instance with AWS SSM. <err>" or "Successfully registered the instance
  with AWS SSM using Managed instance-id: mi-…", in seelog's console format "%Date(2006-01-02
  15:04:05.0000) %LEVEL %Msg" and into /var/log/amazon/ssm (agent/log/logger/defaultconfig.go);
  the registration file /var/lib/amazon/ssm/registration. The SDK's typed error prints "<Code>:
  <Message>" (vendor/github.com/aws/aws-sdk-go/service/ssm/api.go); the service's message text
  is not known, so the limit's is left empty.
- ctr prints progress on stdout; iptables' ``-C`` fails when the rule is missing.

Stand-ins record what they were asked in /run/sandbox-records, never the code or the id (only a
hash of the pair the agent was given): a record is a file the run wrote, and is searched too.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

BWRAP = shutil.which("bwrap")
#: Paths the script and the stand-ins write, each bound to a scratch folder of the same name.
SCRATCH = ("etc", "var/log", "var/lib", "usr/local/bin", "tmp", "var/tmp", "run", "root")
STANDINS = "/usr/local/sbin"
RECORDS = "/run/sandbox-records"
JOIN_LOG = "/var/log/eks-hybrid-lab-join.log"
CLOUD_INIT_OUTPUT = "/var/log/cloud-init-output.log"
INSTANCE_ID = "i-0123456789abcdef0"
MANAGED_INSTANCE_ID = "mi-0a1b2c3d4e5f60718"
#: nodeadm's registration retry, scaled: 60 s of tries 10 s apart (internal/ssm/config.go).
SSM_ATTEMPTS = 6
SSM_BACKOFF = "0.05"
#: cloud-init's PATH on Ubuntu, the stand-ins' folder first.
PATH = f"{STANDINS}:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
AGENT_MODES = ("transient", "ok", "limit")
CTR_MODES = ("ok", "fail", "hang")

_RECORD = f'''
. {STANDINS}/.settings
RECORDS={RECORDS}
mkdir -p "$RECORDS"
record() {{ printf '%s\\n' "$2" >> "$RECORDS/$1"; }}
# The join log's mode whenever a stand-in runs (the first runs right after the script opens
# the log): it must be 0600 from the first.
observe_join_log() {{
  stat -c %a {JOIN_LOG} >> "$RECORDS/join-log-modes" 2>/dev/null || echo missing >> "$RECORDS/join-log-modes"
}}
# The pulls still running (ctr stand-ins not ended): "<when> <pid>".
ctr_alive() {{
  local pid state
  for pid in $(cat "$RECORDS/ctr-pids" 2>/dev/null); do
    state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
    if [ -n "$state" ] && [ "$state" != Z ]; then record ctr-alive "$1 $pid"; fi
  done
}}
'''

_DATE = '''#!/bin/bash
''' + _RECORD + '''observe_join_log
exec /usr/bin/date "$@"
'''

_IPTABLES = '''#!/bin/bash
''' + _RECORD + '''observe_join_log
record iptables "$*"
if [ "$2" = -C ]; then
  echo "iptables: Bad rule (does a matching rule exist in that chain?)." >&2
  exit 1
fi
'''

_SYSTEMCTL = '''#!/bin/bash
''' + _RECORD + '''observe_join_log
record systemctl "$*"
'''

_APT_GET = '''#!/bin/bash
''' + _RECORD + '''observe_join_log
record apt-get "$*"
echo "Hit:1 http://archive.ubuntu.com/ubuntu noble InRelease"
echo "Reading package lists..."
'''

_CLOUD_INIT = '''#!/bin/bash
''' + _RECORD + f'''observe_join_log
record cloud-init "$*"
[ "$*" = "query v1.instance_id" ] && echo {INSTANCE_ID}
'''

# curl -fsSL --retry 5 --connect-timeout 10 -o FILE URL: the nodeadm stand-in, or its sha256sum line.
_CURL = '''#!/bin/bash
''' + _RECORD + f'''observe_join_log
out= url=
while [ $# -gt 0 ]; do
  case $1 in -o) out=$2; shift 2 ;; --retry|--connect-timeout) shift 2 ;; -*) shift ;; *) url=$1; shift ;; esac
done
record curl "$url"
case $url in
  */nodeadm.sha256) cp {STANDINS}/.served/nodeadm.sha256 "$out" ;;
  */nodeadm) cp {STANDINS}/.served/nodeadm "$out" ;;
  *) echo "curl: (6) Could not resolve host: no network in the sandbox" >&2; exit 6 ;;
esac
'''

_CTR = '''#!/bin/bash
''' + _RECORD + '''observe_join_log
record ctr "$*"
echo "$$" >> "$RECORDS/ctr-pids"
echo "$4: resolving      |--------------------------------------|"
case $CTR_MODE in
  hang) exec sleep 600 ;;
  fail) echo "ctr: failed to resolve reference \\"$4\\": unexpected status 429" >&2; exit 1 ;;
esac
echo "unpacking linux/amd64 sha256:0000... done"
'''

_AGENT = '''#!/bin/bash
''' + _RECORD + f'''observe_join_log
# amazon-ssm-agent -register -y -region R -code C -id I (agent/agent_parser.go)
region= code= id=
while [ $# -gt 0 ]; do
  case $1 in -region) region=$2; shift 2 ;; -code) code=$2; shift 2 ;; -id) id=$2; shift 2 ;; *) shift ;; esac
done
record agent-register "$(printf '%s %s' "$code" "$id" | sha256sum | cut -d' ' -f1)"
mkdir -p /var/log/amazon/ssm /var/lib/amazon/ssm
say() {{
  local line
  line="$(/usr/bin/date -u '+%F %T.%4N') $1 $2"
  echo "$line"
  echo "$line" >> /var/log/amazon/ssm/amazon-ssm-agent.log
  if [ "$1" = ERROR ]; then echo "$line" >> /var/log/amazon/ssm/errors.log; fi
}}
tries=$(cat "$RECORDS/agent-tries" 2>/dev/null || echo 0)
echo $((tries + 1)) > "$RECORDS/agent-tries"
case $AGENT_MODE in
  limit) err="RegistrationLimitExceeded: " ;;
  transient) [ "$tries" -eq 0 ] && err="RequestError: send request failed
caused by: Post \\"https://ssm.$region.amazonaws.com/\\": dial tcp: lookup ssm.$region.amazonaws.com: i/o timeout" ;;
esac
if [ -n "${{err:-}}" ]; then
  say ERROR "Registration failed due to error registering the instance with AWS SSM. $err"
  exit 1
fi
printf '{{"ManagedInstanceID":"{MANAGED_INSTANCE_ID}","Region":"%s"}}' "$region" > /var/lib/amazon/ssm/registration
say INFO "Successfully registered the instance with AWS SSM using Managed instance-id: {MANAGED_INSTANCE_ID}"
'''

_NODEADM = '''#!/bin/bash
''' + _RECORD + f'''observe_join_log
record nodeadm "$1"
# zap's production JSON encoder: a backslash, a double quote and control characters escaped.
json() {{
  local s=${{1//\\\\/\\\\\\\\}}
  s=${{s//\\"/\\\\\\"}}
  s=${{s//$'\\n'/\\\\n}}
  s=${{s//$'\\t'/\\\\t}}
  printf '%s' "${{s//$'\\r'/\\\\r}}"
}}
zlog() {{
  local level=$1 caller=$2 msg=$3
  shift 3
  printf '{{"level":"%s","ts":"%s","caller":"%s","msg":"%s"%s}}\\n' "$level" \\
    "$(/usr/bin/date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" "$caller" "$(json "$msg")" "$*" >&2
}}
fatal() {{ zlog fatal nodeadm/main.go:61 "Command failed" ",\\"error\\":\\"$(json "$1")\\""; exit 1; }}
field() {{ sed -n "s/^ *$1: //p" "$config" | head -n1; }}
case $1 in
  install)
    zlog info install/install.go:123 "Validating Kubernetes version" ",\\"kubernetes version\\":\\"$2\\""
    zlog info flows/install.go:84 "Installing containerd..."
    zlog info flows/install.go:117 "Installing SSM agent installer..."
    zlog info flows/install.go:133 "Installing kubelet..."
    mkdir -p /var/lib/standin-nodeadm && echo installed > /var/lib/standin-nodeadm/tracker
    exit 0 ;;
  init) ;;
  *) echo "unexpected nodeadm $*" >&2; exit 2 ;;
esac
[ "$2" = -c ] || {{ echo "unexpected nodeadm $*" >&2; exit 2; }}
config=${{3#file://}}
zlog info init/init.go:90 "Checking user is root..."
ctr_alive nodeadm-init
zlog info hybrid/validator.go:91 "Validating configuration..."
code=$(field activationCode)
id=$(field activationId)
region=$(field region)
if [ "${{#code}}" -lt 20 ] || [ "${{#code}}" -gt 250 ]; then
  fatal "invalid ActivationCode format: $code. Must be 20-250 characters"
fi
zlog info flows/init.go:35 "Configuring Aws..."
if [ -f /var/lib/amazon/ssm/registration ]; then
  zlog info ssm/config.go:37 "SSM agent already registered, skipping registration"
else
  zlog info ssm/config.go:44 "Registering machine with SSM agent"
  agent=$(command -v amazon-ssm-agent)
  n=0
  until out=$("$agent" -register -y -region "$region" -code "$code" -id "$id" 2>&1); do
    err="running command [$agent -register -y -region $region -code $code -id $id]: $out [Err exit status 1]"
    zlog info cmd/retry.go:31 "Command failed, retrying" ",\\"backoff\\":10,\\"error\\":\\"$(json "$err")\\""
    n=$((n + 1))
    if [ "$n" -ge {SSM_ATTEMPTS} ]; then
      fatal "configuring aws credentials with SSM: failed to register machine with SSM after multiple attempts: context deadline exceeded: $err"
    fi
    /usr/bin/sleep {SSM_BACKOFF}
  done
fi
zlog info ssm/config.go:64 "Machine registered with SSM, assigning instance ID as node name" ",\\"instanceID\\":\\"{MANAGED_INSTANCE_ID}\\""
tries=$(cat "$RECORDS/init-tries" 2>/dev/null || echo 0)
echo $((tries + 1)) > "$RECORDS/init-tries"
/usr/bin/date +%s.%N >> "$RECORDS/init-times"
if [ "$tries" -lt "$INIT_FAILURES" ]; then
  fatal "eks cluster is not active"
fi
zlog info flows/init.go:67 "Setting up system aspects..."
zlog info flows/init.go:97 "Configuring daemons..."
zlog info flows/init.go:117 "Daemon is running" ",\\"name\\":\\"kubelet\\""
'''

# What cloud-init does with the user data: run the part with its output through tee.
_RUNNER = '''#!/bin/bash
''' + _RECORD + f'''
umask 022
cd /
/var/lib/cloud/instance/scripts/part-001 < /dev/null 2>&1 | tee -a {CLOUD_INIT_OUTPUT}
echo "${{PIPESTATUS[0]}}" > "$RECORDS/status"
ctr_alive after-script
'''

_STANDINS = {"date": _DATE, "iptables": _IPTABLES, "systemctl": _SYSTEMCTL, "apt-get": _APT_GET,
             "cloud-init": _CLOUD_INIT, "curl": _CURL, "ctr": _CTR,
             "amazon-ssm-agent": _AGENT, ".cloud-init-runner": _RUNNER}


@dataclass
class Run:
    #: The scratch folders, as ``root / "var/log"`` and so on: every file the run wrote.
    root: Path
    #: What cloud-init's tee passed on (the console), and bubblewrap's own stderr.
    console: str
    stderr: str
    timed_out: bool
    seconds: float
    #: When the sandbox started (time.time()): the script's start is no earlier.
    started: float

    def path(self, inside: str) -> Path:
        return self.root / inside.lstrip("/")

    def read(self, inside: str) -> str:
        path = self.path(inside)
        return path.read_text(errors="replace") if path.exists() else ""

    def record(self, name: str) -> list[str]:
        return self.read(f"{RECORDS}/{name}").splitlines()

    @property
    def status(self) -> Optional[int]:
        status = self.record("status")
        return int(status[0]) if status else None

    @property
    def join_log(self) -> str:
        return self.read(JOIN_LOG)

    def written(self) -> Iterator[Path]:
        """Every file under the scratch folders (what the run wrote, and cloud-init's copies)."""
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                yield path

    def inside(self, path: Path) -> str:
        return "/" + str(path.relative_to(self.root))


@functools.lru_cache(maxsize=None)
def unavailable() -> Optional[str]:
    """Why the sandbox cannot run here, or None."""
    if BWRAP is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    for path in ("/" + p for p in (*SCRATCH, STANDINS.lstrip("/"))):
        if not os.path.isdir(path):
            return f"{path} does not exist on this machine: bubblewrap cannot bind a scratch folder over it"
    done = subprocess.run([BWRAP, *_namespaces(), "--ro-bind", "/", "/", "--proc", "/proc",
                           "--dev", "/dev", "/bin/true"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"bubblewrap cannot make a sandbox here: {done.stderr.strip()}"
    return None


def _namespaces() -> list[str]:
    return ["--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0",
            "--die-with-parent", "--new-session"]


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def run_user_data(tmp_path: Path, script: str, *, agent: str = "transient", ctr: str = "ok",
                  init_failures: int = 1, timeout: float = 60) -> Run:
    """Runs ``script`` as cloud-init would, at first boot of a host. ``agent``: the SSM
    agent's registration, ``transient`` (the first try fails on the network, the next passes),
    ``ok`` or ``limit`` (refused: RegistrationLimitExceeded); ``ctr``: each pull ``ok``,
    ``fail`` or ``hang``; ``init_failures``: nodeadm init tries that find the cluster not
    active yet."""
    if agent not in AGENT_MODES or ctr not in CTR_MODES:
        raise ValueError(f"agent {agent!r} / ctr {ctr!r}: the stand-ins know agent {AGENT_MODES} "
                         f"and ctr {CTR_MODES}")
    root = tmp_path / "host"
    for path in SCRATCH:
        (root / path).mkdir(parents=True)
    # What an Ubuntu image has, that the script writes into.
    (root / "etc/systemd/system").mkdir(parents=True)
    standins = tmp_path / "standins"
    for name, text in _STANDINS.items():
        _write(standins / name, text, 0o755)
    # How the stand-ins behave, read by each (not in the script's environment).
    _write(standins / ".settings", f"AGENT_MODE={agent}\nCTR_MODE={ctr}\n"
           f"INIT_FAILURES={int(init_failures)}\n", 0o644)
    _write(standins / ".served/nodeadm", _NODEADM, 0o755)
    digest = hashlib.sha256(_NODEADM.encode()).hexdigest()
    _write(standins / ".served/nodeadm.sha256", f"{digest}  nodeadm\n", 0o644)
    # cloud-init's copies of the user data, with its modes.
    _write(root / "var/lib/cloud/instance/user-data.txt", script, 0o600)
    _write(root / "var/lib/cloud/instance/scripts/part-001", script, 0o700)

    command = [BWRAP, *_namespaces(), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    for path in SCRATCH:
        command += ["--bind", str(root / path), "/" + path]
    command += ["--ro-bind", str(standins), STANDINS, "--clearenv",
                "--setenv", "PATH", PATH, "--setenv", "HOME", "/root", "--setenv", "LANG", "C.UTF-8",
                f"{STANDINS}/.cloud-init-runner"]
    started = time.time()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        console, stderr, timed_out = done.stdout, done.stderr, False
    except subprocess.TimeoutExpired as expired:
        def text(value) -> str:
            return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")
        console, stderr, timed_out = text(expired.stdout), text(expired.stderr), True
    return Run(root=root, console=console, stderr=stderr, timed_out=timed_out,
               seconds=time.time() - started, started=started)
