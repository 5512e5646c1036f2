"""The README's path from the recorded runs to the summary page, run as a newcomer pastes it:
the ``sh`` block after its first one, which replays every recording into one rehearsals
folder and gathers them into the page. The page must show what a rehearsal evening shows:
the pre-check and demos 1, 2 and 3 READY and the open questions answered."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rehearse.pages.summary import PARTS
from tests import rehearsal_evening

#: The page inlines the charts the replays draw.
pytestmark = pytest.mark.charts

ROOT = Path(__file__).resolve().parents[1]
#: Where the README's block writes: the test writes into its own temporary folder instead.
README_FOLDER = "/tmp/replay"
#: The summary's checklist: the pre-check and the three demos.
PARTS_SHOWN = tuple(part.title for part in PARTS)


def replay_block(readme: str) -> str:
    """The second ``sh`` block of the README (the first installs and plans)."""
    blocks = re.findall(r"^```sh\n(.*?)^```$", readme, flags=re.S | re.M)
    assert len(blocks) >= 2, "the README has no replay block after its first one"
    return blocks[1]


def test_the_block_is_the_replay_to_summary_path():
    block = replay_block((ROOT / "README.md").read_text())
    assert "python -m rehearse report" in block and "python -m rehearse summary" in block
    assert block.count(f"--out {README_FOLDER}") == 2, "report and summary name one folder"


def test_the_readme_replay_block_run_as_written_shows_the_pre_check_and_every_demo_ready(tmp_path):
    block = replay_block((ROOT / "README.md").read_text())
    out = tmp_path / "replay"
    script = block.replace(README_FOLDER, str(out))
    # A fresh shell in a clone: `python` is the one with the test requirements, nothing else
    # of this process is inherited but the environment's basics.
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "HOME": str(tmp_path), "LANG": "C.UTF-8", "MPLBACKEND": "Agg",
           "MPLCONFIGDIR": str(tmp_path / "mpl")}
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    stack = rehearsal_evening.STACK
    page, md = out / f"{stack}-summary.html", out / f"{stack}-summary.md"
    assert f"summary: {page} and {md}" in done.stdout
    assert page.is_file()
    text = md.read_text()
    for part in PARTS_SHOWN:
        assert f"- [x] **{part}**: READY" in text, text[:3000]
    assert "## Open questions" in text
    for question in ("gateway-throughput", "hostnet"):
        assert f"### `python -m rehearse {question}`: PASS" in text
    # One run folder a recording, each named by its start, the stack and the command.
    recordings = [p for p in (ROOT / "tests" / "fixtures" / "rehearse").iterdir()
                  if (p / "events.jsonl").is_file()]
    folders = [p for p in out.iterdir() if p.is_dir()]
    assert len(folders) == len(recordings) == len(rehearsal_evening.STARTED)
    assert all(f.name.split("-", 1)[1].startswith(f"{stack}-") for f in folders)
    shutil.rmtree(out)
