#!/usr/bin/env python3
"""Build the real engines the tests run on 127.0.0.1 from their pinned Go modules.

    python3 engines/build.py                 # the core: kubernetes etcd kwok
    python3 engines/build.py all             # the core plus karpenter and kyverno
    python3 engines/build.py etcd kwok       # only these groups
    python3 engines/build.py --list          # groups, versions, binaries; builds nothing

Each group is a Go module of ours under engines/<group>/ whose go.mod/go.sum are the pins.
A group is built once into engines/bin/.groups/<group>-<version>-<hash>/ (the hash covers its
go.mod, go.sum, this recipe and the Go version, so any pin change gives a new folder); the
requested groups are then hard-linked into one folder, engines/bin/<versions>-<hash>/, whose
absolute path is the LAST line of stdout. A folder that exists is reused without running
`go build` (a warm call takes well under a second). Builds run at nice 19 with CGO_ENABLED=0,
in the default Go module and build caches, and never change go.mod (-mod=readonly).
Everything but the path goes to stderr.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

HERE = Path(__file__).resolve().parent
BIN = HERE / "bin"
PROG = "engines/build.py"

# Bump when the recipe below changes in a way the hash of the dict would not show.
RECIPE_REVISION = 1
# The pins' go.mod files use `tool` directives (Go 1.24+); a group may ask for a newer toolchain.
MIN_GO = (1, 24)


def _kubernetes_ldflags(version: str, tag_time: str) -> list[str]:
    # Upstream's hack/lib/version.sh stamps both packages; the variable names are those of
    # k8s.io/component-base/version/base.go and k8s.io/client-go/pkg/version/base.go.
    major, minor = version.lstrip("v").split(".")[:2]
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor,
              "gitTreeState": "clean", "buildDate": tag_time}
    return [f"-X {pkg}.{key}={val}"
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
            for key, val in values.items()]


GROUPS: dict[str, dict] = {
    "kubernetes": {
        "short": "k8s",
        "module": "k8s.io/kubernetes",
        "binaries": {
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        },
        # Upstream's hack/lib/golang.sh builds release binaries with these tags.
        "tags": "selinux,notest,grpcnotrace",
        "ldflags": "kubernetes",
    },
    "etcd": {
        "short": "etcd",
        "module": "go.etcd.io/etcd/server/v3",
        "binaries": {"etcd": "go.etcd.io/etcd/server/v3"},
    },
    "kwok": {
        "short": "kwok",
        "module": "sigs.k8s.io/kwok",
        # sigs.k8s.io/kwok/pkg/consts.Version is already "0.8.0" in the v0.8.0 source.
        "binaries": {"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
    },
    "karpenter": {
        "short": "karpenter",
        "module": "sigs.k8s.io/karpenter",
        # Upstream names this binary `kwok` too; renamed so it cannot shadow kwok itself.
        "binaries": {"karpenter-kwok": "sigs.k8s.io/karpenter/kwok"},
        "stamp": {"sigs.k8s.io/karpenter/pkg/operator.Version": "{version}"},
        # v1.15.0 needs Go >= 1.26.9: run that toolchain (fetched from the module proxy) when
        # the local go is older.
        "fetch_toolchain": True,
        "optional": True,
    },
    "kyverno": {
        "short": "kyverno",
        "module": "github.com/kyverno/kyverno",
        # The admission controller, and the background controller that carries out the lab's
        # mutate-existing rule (components/kyverno.py: the patch of a bound pod is its work).
        "binaries": {"kyverno": "github.com/kyverno/kyverno/cmd/kyverno",
                     "kyverno-background-controller": "github.com/kyverno/kyverno/cmd/background-controller"},
        # As its Makefile does (LD_FLAGS); unstamped, it reports the main module's "(devel)".
        "stamp": {"github.com/kyverno/kyverno/pkg/version.BuildVersion": "{version}"},
        "optional": True,
    },
}
DEFAULT = [name for name, g in GROUPS.items() if not g.get("optional")]


def say(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def die(msg: str) -> NoReturn:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def go_version() -> tuple[str, tuple[int, ...]]:
    go = shutil.which("go")
    if go is None:
        die("`go` not found on PATH; install Go (1.26 or newer) first")
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                             timeout=60, cwd=HERE).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        die(f"`{go} env GOVERSION` failed ({exc}); need Go 1.26 or newer")
    m = re.match(r"go(\d+)\.(\d+)(?:\.(\d+))?", out)
    if not m:
        die(f"cannot read the Go version from `{go} env GOVERSION` (got {out!r}); need Go 1.26 or newer")
    return out, tuple(int(x or 0) for x in m.groups())


def parse_gomod(text: str, module: str) -> tuple[str, tuple[int, ...]]:
    """The pinned version of `module` and the `go` directive, read without running go."""
    ver = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.M)
    godir = re.search(r"^go\s+(\d+)\.(\d+)(?:\.(\d+))?\s*$", text, re.M)
    if not ver or not godir:
        die(f"cannot read the pin of {module} or the go directive from its go.mod")
    return ver.group(1), tuple(int(x or 0) for x in godir.groups())


class Group:
    def __init__(self, name: str, gover: str, gotuple: tuple[int, ...]):
        self.name = name
        self.spec = GROUPS[name]
        self.dir = HERE / name
        gomod = self.dir / "go.mod"
        if not gomod.is_file():
            die(f"group {name!r} has no {gomod.relative_to(HERE.parent)}")
        text = gomod.read_text()
        self.version, self.go_min = parse_gomod(text, self.spec["module"])
        # GOTOOLCHAIN for this group's go commands, when the local go is too old for it.
        self.toolchain = None
        if gotuple < self.go_min and self.spec.get("fetch_toolchain"):
            self.toolchain = "go" + ".".join(map(str, self.go_min))
            gover = self.toolchain  # what builds it
        gosum = self.dir / "go.sum"
        h = hashlib.sha256()
        for part in (text, gosum.read_text() if gosum.is_file() else "",
                     json.dumps(self.spec, sort_keys=True), str(RECIPE_REVISION), gover):
            h.update(part.encode())
            h.update(b"\0")
        self.hash = h.hexdigest()[:10]
        self.out = BIN / ".groups" / f"{name}-{self.version}-{self.hash}"

    @property
    def tag(self) -> str:
        return f"{self.spec['short']}-{self.version}"

    def build(self) -> None:
        env = dict(os.environ, CGO_ENABLED="0")
        if self.toolchain:
            env["GOTOOLCHAIN"] = self.toolchain
            say(f"{self.name} needs Go {self.toolchain[2:]}: using GOTOOLCHAIN={self.toolchain}")
        ldflags = ["-s", "-w"]
        ldflags += [f"-X {var}={val.format(version=self.version)}"
                    for var, val in self.spec.get("stamp", {}).items()]
        if self.spec.get("ldflags") == "kubernetes":
            info = subprocess.run(["go", "list", "-m", "-json", self.spec["module"]], cwd=self.dir,
                                  env=env, capture_output=True, text=True)
            if info.returncode != 0:
                die(f"`go list -m {self.spec['module']}` failed in {self.dir}: "
                    + (info.stderr.strip().splitlines() or ["?"])[-1])
            tag_time = json.loads(info.stdout).get("Time", "1970-01-01T00:00:00Z")
            ldflags += _kubernetes_ldflags(self.version, tag_time)
        say(f"building {self.name} {self.version} ({', '.join(self.spec['binaries'])}); "
            "a cold build takes minutes")
        t0 = time.monotonic()
        tmp = self.out.with_name(f".tmp-{self.out.name}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for binary, pkg in self.spec["binaries"].items():
            cmd = ["go", "build", "-mod=readonly", "-trimpath", "-buildvcs=false",
                   "-ldflags", " ".join(ldflags), "-o", str(tmp / binary)]
            if self.spec.get("tags"):
                cmd += ["-tags", self.spec["tags"]]
            cmd.append(pkg)
            t1 = time.monotonic()
            if (subprocess.run(cmd, cwd=self.dir, env=env, stdout=sys.stderr).returncode != 0
                    or not (tmp / binary).is_file()):
                shutil.rmtree(tmp, ignore_errors=True)
                die(f"building {binary} ({pkg}) in {self.dir} failed (see go's output above)")
            say(f"  {binary}: {time.monotonic() - t1:.0f} s")
        try:
            tmp.rename(self.out)
        except OSError:  # another build of the same pins won the race
            shutil.rmtree(tmp, ignore_errors=True)
        say(f"built {self.name} in {time.monotonic() - t0:.0f} s")


def assemble(groups: list[Group], gover: str) -> Path:
    h = hashlib.sha256("\0".join(g.out.name for g in groups).encode()).hexdigest()[:8]
    final = BIN / ("_".join(g.tag for g in groups) + f"-{h}")
    if final.is_dir():
        return final
    tmp = BIN / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for g in groups:
        for binary in g.spec["binaries"]:
            try:
                os.link(g.out / binary, tmp / binary)
            except OSError:
                shutil.copy2(g.out / binary, tmp / binary)
    (tmp / "VERSIONS").write_text("".join(f"{g.name} {g.version} ({g.out.name})\n" for g in groups)
                                  + f"go {gover}\n")
    try:
        tmp.rename(final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def main(argv: list[str]) -> int:
    # allow_abbrev=False: a prefix such as --wh is refused, not taken for --where.
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 allow_abbrev=False)
    ap.add_argument("groups", nargs="*", metavar="GROUP",
                    help=f"any of {', '.join(GROUPS)}, or 'all' (default: {' '.join(DEFAULT)})")
    ap.add_argument("--list", action="store_true", help="show the groups and their pins; build nothing")
    ap.add_argument("--where", action="store_true",
                    help="print the folder if the groups are built (exit 0), else say what is "
                         "missing (exit 1); build nothing")
    args = ap.parse_args(argv)
    names = args.groups or DEFAULT
    if "all" in names:
        names = list(GROUPS)
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        die(f"unknown group(s) {', '.join(unknown)}; known: {', '.join(GROUPS)}, all")
    names = [n for n in GROUPS if n in names]  # fixed order, no duplicates

    gover, gotuple = go_version()
    groups = [Group(n, gover, gotuple) for n in names]
    need = max([g.go_min for g in groups if not g.toolchain] + [MIN_GO])
    if gotuple < need:
        die(f"Go {'.'.join(map(str, need))} or newer is needed by the pins (found {gover})")
    if args.list:
        for g in groups:
            print(f"{g.name:<11} {g.version:<9} {' '.join(g.spec['binaries'])}")
        return 0

    missing = [g for g in groups if not g.out.is_dir()]
    if args.where:
        if missing:
            say(f"not built: {', '.join(g.name for g in missing)} (build with: python3 {PROG}"
                f"{' ' + ' '.join(args.groups) if args.groups else ''})")
            return 1
        print(assemble(groups, gover))
        return 0
    if missing:
        BIN.mkdir(parents=True, exist_ok=True)
        os.nice(19)  # the other tests share the cores; children inherit it
        with open(BIN / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; a waiter then reuses it
            for g in missing:
                if not g.out.is_dir():
                    g.build()
    print(assemble(groups, gover))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
