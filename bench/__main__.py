"""`python -m bench [overhead ...]`: run benchmarks, print figures, write bench/results.json."""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from bench import overhead


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("which", nargs="*", default=["overhead"], choices=["overhead"])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = {"machine": f"{platform.machine()}, {__import__('os').cpu_count()} cpus, {platform.python_version()}"}
    if "overhead" in args.which:
        results["overhead"] = overhead.run(args.epochs, args.repeats)
    out = Path(__file__).parent / "results.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
