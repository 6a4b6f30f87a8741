"""Integration tests run against this machine's real Docker engine (make integration starts it)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpufleet._collection import ensure_importable  # noqa: E402

ensure_importable()
