"""Starting the Ollama impostor (tests/engine_pages/ollama_impostor.py) as ``./ollama <role>
PAGES``, for the Ollama tests: a real process that the probes find by its command line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PAGES = Path(__file__).parent / "engine_pages"


def start(tmp_path: Path, pages: str, env: dict[str, str],
          role: str = "serve") -> tuple[subprocess.Popen, int]:
    """The impostor in ``tmp_path`` serving ``PAGES / pages`` (an absolute path is taken as
    it is), with ``env`` as its whole environment beside PATH and HOME; (process, port)."""
    if not (tmp_path / "ollama").exists():
        (tmp_path / "ollama").symlink_to(os.path.realpath(sys.executable))
    shutil.copy(PAGES / "ollama_impostor.py", tmp_path / role)
    full = {"PATH": os.environ.get("PATH", "/usr/bin"), "HOME": str(tmp_path), **env}
    process = subprocess.Popen(["./ollama", role, str(PAGES / pages)], cwd=tmp_path, env=full,
                               stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    line = process.stdout.readline()  # the port, once it listens
    if not line.strip().isdigit():
        process.kill()
        pytest.fail(f"the Ollama impostor did not start: {line!r}")
    return process, int(line)


def stop(*processes: subprocess.Popen) -> None:
    for process in processes:
        process.kill()
        process.wait(10)
