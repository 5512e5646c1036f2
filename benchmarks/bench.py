"""Speed benchmark (not part of the test suite): how long the full lab's program takes to
evaluate offline, against the floor of importing what it uses, and the plan end to end.

    python benchmarks/bench.py [--runs 5] [--json]

Each measurement runs in a fresh interpreter (as `pulumi preview` and the plan do), so imports
count; the median of ``--runs`` is reported, with peak memory (max RSS). Target: evaluation
under 2x the import floor.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent

# The modules the program imports, captured from a real run, then imported alone: the floor.
_CAPTURE = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {project!r})
    before = set(sys.modules)
    from offline.runner import load_stack_config, run_program
    run_program(load_stack_config("dev"))
    print(json.dumps(sorted(m for m in set(sys.modules) - before
                            if m.split(".")[0] in ("pulumi", "pulumi_aws", "pulumi_kubernetes",
                                                   "boto3", "botocore", "yaml", "dill", "grpc",
                                                   "google"))))
""")
_IMPORTS = textwrap.dedent("""
    import importlib, json, resource, sys, time
    start = time.perf_counter()
    for name in json.loads(sys.argv[1]):
        try:
            importlib.import_module(name)
        except Exception:
            pass
    print(json.dumps({"seconds": time.perf_counter() - start,
                      "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")
_EVALUATE = textwrap.dedent("""
    import json, resource, sys, time
    start = time.perf_counter()
    sys.path.insert(0, {project!r})
    from offline.runner import load_stack_config, run_program
    run = run_program(load_stack_config("dev"))
    seconds = time.perf_counter() - start
    # The plan's own count and words (ProgramRun.counts), so the two never differ.
    counts = run.counts()
    print(json.dumps({"seconds": seconds, "resources": counts.resources,
                      "providers": counts.providers, "components": counts.components,
                      "resources_text": counts.describe(),
                      "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")


def _python(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=PROJECT, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _plan_seconds() -> float:
    import time
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "offline.plan"], cwd=PROJECT, capture_output=True, check=True)
    return time.perf_counter() - start


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    modules = json.dumps(json.loads(subprocess.run(
        [sys.executable, "-c", _CAPTURE.replace("{project!r}", repr(str(PROJECT)))], cwd=PROJECT,
        capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]))
    floor = [_python(_IMPORTS, modules) for _ in range(args.runs)]
    evaluate = [_python(_EVALUATE.replace("{project!r}", repr(str(PROJECT)))) for _ in range(args.runs)]
    plan = [_plan_seconds() for _ in range(args.runs)]

    result = {
        "runs": args.runs,
        "python": sys.version.split()[0],
        "import_floor_s": round(statistics.median(r["seconds"] for r in floor), 3),
        "import_floor_max_rss_mb": round(statistics.median(r["max_rss_mb"] for r in floor), 1),
        "evaluation_s": round(statistics.median(r["seconds"] for r in evaluate), 3),
        "evaluation_max_rss_mb": round(statistics.median(r["max_rss_mb"] for r in evaluate), 1),
        # Numbers for --json readers; the plan's own words for the text.
        "resources": evaluate[0]["resources"],
        "providers": evaluate[0]["providers"],
        "components": evaluate[0]["components"],
        "plan_s": round(statistics.median(plan), 3),
    }
    result["evaluation_over_floor"] = round(result["evaluation_s"] / result["import_floor_s"], 2)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"full lab, {evaluate[0]['resources_text']}, median of {args.runs} fresh interpreters "
              f"(Python {result['python']})")
        print(f"  import floor        {result['import_floor_s']:.2f} s  {result['import_floor_max_rss_mb']:.0f} MB")
        print(f"  program evaluation  {result['evaluation_s']:.2f} s  {result['evaluation_max_rss_mb']:.0f} MB"
              f"  ({result['evaluation_over_floor']}x the floor; target < 2x)")
        print(f"  plan end to end     {result['plan_s']:.2f} s")
    return 0 if result["evaluation_over_floor"] < 2 else 1


if __name__ == "__main__":
    sys.exit(main())
