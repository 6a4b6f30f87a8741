"""How much does validating a dstack file cost compared with just loading its YAML?

Both are measured in the same run on the same files (dstack's documentation examples), so the
ratio holds on a noisy machine. The target: full validation, including the nesting pre-scan and
the size walk, costs at most 3x a plain ``yaml.safe_load`` with the C loader.

    .venv/bin/python bench/validate_speed.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpufleet._collection import spec  # noqa: E402

TARGET_RATIO = 3.0


def best_of(function, texts, rounds=7, repeat=20):
    timings = []
    for _round in range(rounds):
        start = time.perf_counter()
        for _repeat in range(repeat):
            for text in texts:
                function(text)
        timings.append(time.perf_counter() - start)
    return min(timings), statistics.median(timings)


def main():
    model = spec()
    files = sorted((ROOT / "tests/unit/fixtures/dstack_docs").glob("*.dstack.yml"))
    texts = [f.read_text() for f in files]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    base_best, base_median = best_of(lambda t: yaml.load(t, Loader=loader), texts)
    ours_best, ours_median = best_of(model.parse_text, texts)
    ratio = ours_best / base_best
    per_file_ms = ours_best / (20 * len(texts)) * 1000
    print(f"files: {len(texts)}")
    print(f"yaml.load (C loader): best {base_best:.3f}s median {base_median:.3f}s")
    print(f"gpufleet parse_text:  best {ours_best:.3f}s median {ours_median:.3f}s")
    print(f"ratio (best/best): {ratio:.2f}x  target <= {TARGET_RATIO}x  per file: {per_file_ms:.3f} ms")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
