#!/usr/bin/env python3
"""Build the real engines the tests run on 127.0.0.1 from their pinned Go modules.

    python3 engines/build.py                 # the core: kubernetes etcd kwok
    python3 engines/build.py all             # the core plus karpenter, kyverno and the Pulumi engine
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
# The steering folder beside the checkout: the Pulumi language host's source is there
# (shared/pulumi/language-python: upstream main.go with a go.mod of ours; its module is not served).
SHARED = HERE.parent.parent / "shared"
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
    "pulumi": {
        "short": "pulumi",
        "module": "github.com/pulumi/pulumi/pkg/v3",
        # pkg's go.mod replaces sdk/v3 with ../sdk, so `go install …@v3.276.0` is refused; our
        # module requires pkg and sdk at the same tag instead.
        "binaries": {"pulumi": "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"},
        # Unstamped, `pulumi version` answers v3.0.0-dev; the Automation API checks the version.
        "stamp": {"github.com/pulumi/pulumi/sdk/v3/go/common/version.Version": "{version}"},
        # The Python language host, built from shared/ in a build folder (the CLI finds it on
        # PATH), and the two upstream scripts it runs, which must sit beside it.
        "language_host": {
            "source": "pulumi/language-python",
            "binary": "pulumi-language-python",
            "scripts": ["pulumi-language-python-exec", "pulumi-resource-pulumi-python"],
        },
        "optional": True,
    },
    "pulumi-kubernetes": {
        "short": "pulumi-k8s",
        "module": "github.com/pulumi/pulumi-kubernetes/provider/v4",
        "binaries": {"pulumi-resource-kubernetes":
                     "github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes"},
        # The proxy serves this module only as a pseudo-version; its commit is the one tagged
        # v4.25.0 (git describe --tags f47bc2d6f199 in pulumi/pulumi-kubernetes), and that is the
        # version stamped, so the engine and the SDK agree on what runs.
        "releases": {"v4.0.0-20260115033456-f47bc2d6f199": "4.25.0"},
        "stamp": {"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version": "{release}"},
        # The module zip lacks the two files its main package embeds (upstream's Makefile makes
        # them), and its go.mod replaces sdk/v4 with ../sdk, which is not in the zip: build a
        # writable copy with both files made and that line dropped, through a replace to it.
        "copy_module": {
            "embed": {"cmd/pulumi-resource-kubernetes/schema.json":
                      "cmd/pulumi-resource-kubernetes/schema-embed.json",
                      "cmd/pulumi-resource-kubernetes/terraform-mapping.json":
                      "cmd/pulumi-resource-kubernetes/terraform-mapping-embed.json"},
            "drop_replace": "github.com/pulumi/pulumi-kubernetes/sdk/v4",
        },
        "optional": True,
    },
}
DEFAULT = [name for name, g in GROUPS.items() if not g.get("optional")]


def say(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def die(msg: str) -> NoReturn:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def _give_up(tmp: Path, msg: str) -> NoReturn:
    """die(), leaving no half-built folder behind."""
    shutil.rmtree(tmp, ignore_errors=True)
    die(msg)


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
        # The release a pseudo-version's commit is (stamped and shown instead of the pseudo-version).
        self.release = self.version.lstrip("v")
        if "releases" in self.spec:
            if self.version not in self.spec["releases"]:
                die(f"{name}: the pin {self.version} has no release in build.py's GROUPS"
                    f"[{name!r}]['releases']; find the tag of its commit and add it")
            self.release = self.spec["releases"][self.version]
        # GOTOOLCHAIN for this group's go commands, when the local go is too old for it.
        self.toolchain = None
        if gotuple < self.go_min and self.spec.get("fetch_toolchain"):
            self.toolchain = "go" + ".".join(map(str, self.go_min))
            gover = self.toolchain  # what builds it
        gosum = self.dir / "go.sum"
        h = hashlib.sha256()
        for part in (text, gosum.read_text() if gosum.is_file() else "",
                     json.dumps(self.spec, sort_keys=True), str(RECIPE_REVISION), gover,
                     *self._source_texts()):
            h.update(part.encode())
            h.update(b"\0")
        self.hash = h.hexdigest()[:10]
        self.out = BIN / ".groups" / f"{name}-{self.shown_version}-{self.hash}"

    @property
    def shown_version(self) -> str:
        return f"v{self.release}" if "releases" in self.spec else self.version

    @property
    def tag(self) -> str:
        return f"{self.spec['short']}-{self.shown_version}"

    @property
    def files(self) -> list[str]:
        """Every file the group puts in the folder: its binaries, and a language host's files."""
        host = self.spec.get("language_host")
        return list(self.spec["binaries"]) + ([host["binary"], *host["scripts"]] if host else [])

    def _source_texts(self) -> list[str]:
        host = self.spec.get("language_host")
        if not host:
            return []
        folder = SHARED / host["source"]
        names = ["go.mod", "go.sum", "main.go", *host["scripts"]]
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            die(f"{self.name}: the language host's source is not in {folder} (missing "
                f"{', '.join(missing)}); it comes from the shared folder beside the checkout")
        return [(folder / n).read_text() for n in names]

    def _go(self, cmd: list[str], cwd: Path, env: dict, what: str, tmp: Path) -> None:
        if subprocess.run(cmd, cwd=cwd, env=env, stdout=sys.stderr).returncode != 0:
            _give_up(tmp, f"{what} in {cwd} failed (see go's output above)")

    def _module_copy(self, work: Path, env: dict, tmp: Path) -> Path:
        """A writable copy of the pinned module with its embed files made and its replace of a
        sibling dropped, and a copy of our main module replacing the pin with it; returns the
        latter (the folder to build in)."""
        recipe = self.spec["copy_module"]
        module = self.spec["module"]
        self._go(["go", "mod", "download", module], self.dir, env, f"go mod download {module}", tmp)
        found = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=self.dir,
                               env=env, capture_output=True, text=True)
        source = Path(found.stdout.strip())
        if found.returncode != 0 or not source.is_dir():
            _give_up(tmp, f"cannot find {module} in the module cache: {found.stderr.strip()}")
        copy = work / "module"
        shutil.copytree(source, copy)
        for path in [copy, *copy.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)  # the module cache is read-only
        for src, dst in recipe["embed"].items():
            shutil.copyfile(copy / src, copy / dst)
        gomod = copy / "go.mod"
        lines = gomod.read_text().splitlines(keepends=True)
        kept = [ln for ln in lines
                if not re.match(rf"\s*replace\s+{re.escape(recipe['drop_replace'])}\s", ln)]
        if len(kept) != len(lines) - 1:
            _give_up(tmp, f"{module}'s go.mod has no single `replace {recipe['drop_replace']}` line to drop")
        gomod.write_text("".join(kept))
        main = work / "main"
        main.mkdir()
        for name in ("go.mod", "go.sum"):
            shutil.copyfile(self.dir / name, main / name)
        self._go(["go", "mod", "edit", f"-replace={module}={copy}"], main, env,
                 "go mod edit -replace", tmp)
        return main

    def _language_host(self, work: Path, env: dict, ldflags: list[str], tmp: Path) -> None:
        host = self.spec["language_host"]
        source = SHARED / host["source"]
        build = work / "language-host"
        build.mkdir()
        for name in ("go.mod", "go.sum", "main.go"):
            shutil.copyfile(source / name, build / name)
        t1 = time.monotonic()
        self._go(["go", "build", "-mod=readonly", "-trimpath", "-buildvcs=false",
                  "-ldflags", " ".join(ldflags), "-o", str(tmp / host["binary"]), "."],
                 build, env, f"building {host['binary']} (from {source})", tmp)
        for script in host["scripts"]:
            shutil.copyfile(source / script, tmp / script)
            (tmp / script).chmod(0o755)
        say(f"  {host['binary']} (+ {', '.join(host['scripts'])}): {time.monotonic() - t1:.0f} s")

    def build(self) -> None:
        env = dict(os.environ, CGO_ENABLED="0")
        if self.toolchain:
            env["GOTOOLCHAIN"] = self.toolchain
            say(f"{self.name} needs Go {self.toolchain[2:]}: using GOTOOLCHAIN={self.toolchain}")
        ldflags = ["-s", "-w"]
        ldflags += [f"-X {var}={val.format(version=self.version, release=self.release)}"
                    for var, val in self.spec.get("stamp", {}).items()]
        if self.spec.get("ldflags") == "kubernetes":
            info = subprocess.run(["go", "list", "-m", "-json", self.spec["module"]], cwd=self.dir,
                                  env=env, capture_output=True, text=True)
            if info.returncode != 0:
                die(f"`go list -m {self.spec['module']}` failed in {self.dir}: "
                    + (info.stderr.strip().splitlines() or ["?"])[-1])
            tag_time = json.loads(info.stdout).get("Time", "1970-01-01T00:00:00Z")
            ldflags += _kubernetes_ldflags(self.version, tag_time)
        say(f"building {self.name} {self.shown_version} ({', '.join(self.files)}); "
            "a cold build takes minutes")
        t0 = time.monotonic()
        tmp = self.out.with_name(f".tmp-{self.out.name}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        work = tmp / ".work"  # build folders (module copies); removed before the rename
        work.mkdir()
        where = self._module_copy(work, env, tmp) if "copy_module" in self.spec else self.dir
        for binary, pkg in self.spec["binaries"].items():
            cmd = ["go", "build", "-mod=readonly", "-trimpath", "-buildvcs=false",
                   "-ldflags", " ".join(ldflags), "-o", str(tmp / binary)]
            if self.spec.get("tags"):
                cmd += ["-tags", self.spec["tags"]]
            cmd.append(pkg)
            t1 = time.monotonic()
            self._go(cmd, where, env, f"building {binary} ({pkg})", tmp)
            if not (tmp / binary).is_file():
                _give_up(tmp, f"building {binary} ({pkg}) in {where} wrote no binary")
            say(f"  {binary}: {time.monotonic() - t1:.0f} s")
        if "language_host" in self.spec:
            self._language_host(work, env, ldflags, tmp)
        shutil.rmtree(work)
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
        for binary in g.files:
            try:
                os.link(g.out / binary, tmp / binary)
            except OSError:
                shutil.copy2(g.out / binary, tmp / binary)
    (tmp / "VERSIONS").write_text("".join(f"{g.name} {g.shown_version} ({g.out.name})\n" for g in groups)
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
            print(f"{g.name:<17} {g.shown_version:<9} {' '.join(g.files)}")
        return 0

    missing = [g for g in groups if not g.out.is_dir()]
    if args.where:
        if missing:
            named = "; ".join(f"{g.name} ({', '.join(g.files)})" for g in missing)
            say(f"not built: {named} (build with: python3 {PROG}"
                f"{' ' + ' '.join(args.groups) if args.groups else ''})")
            return 1
        print(assemble(groups, gover))
        return 0
    if missing:
        BIN.mkdir(parents=True, exist_ok=True)
        os.nice(19)  # the other tests share the cores; children inherit it
        for g in missing:
            # One build of a group at a time; a waiter then reuses it. Other groups may build
            # meanwhile (a second caller's downloads overlap the first one's compiling).
            with open(BIN / f".lock-{g.name}", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not g.out.is_dir():
                    g.build()
    print(assemble(groups, gover))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
