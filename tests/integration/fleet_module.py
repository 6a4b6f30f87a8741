"""Running the gpufleet.cluster.fleet module as ansible runs it (AnsiballZ in a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def run_fleet_module(env, *args, check=False):
    """``ansible localhost -m gpufleet.cluster.fleet -a ARGS``: (its result, the process)."""
    command = [str(BIN / "ansible"), "localhost", "-m", "gpufleet.cluster.fleet",
               "-a", " ".join(args), "-e", "ansible_python_interpreter=" + sys.executable]
    if check:
        command.append("--check")
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False,
                          timeout=300)
    assert "=>" in proc.stdout, proc.stdout + proc.stderr
    return json.loads(proc.stdout.split("=>", 1)[1]), proc
