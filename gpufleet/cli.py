"""``gpufleet``: dstack-like commands over the gpufleet.cluster collection.

Only ``validate`` exists so far; the fleet and task commands arrive with their playbooks.
This module parses arguments and presents results; the logic lives in the collection.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__
from ._collection import CollectionNotFound, spec


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description="Run dstack-style GPU fleets and tasks with Ansible (gpufleet.cluster).",
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    validate = commands.add_parser(
        "validate",
        help="check dstack fleet, task and volume files",
        description=(
            "Check dstack configuration files (type: fleet, task, volume). Prints one line per "
            "file, 'ok' or its problems, and exits 0 only if every file is valid."
        ),
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="configuration files")
    validate.add_argument(
        "--json",
        action="store_true",
        help="print one JSON list with an object per file, including the normalized config",
    )
    validate.set_defaults(handler=_validate)
    return parser


def _validate(args, out, err) -> int:
    model = spec()
    results = [model.validate_file(path) for path in args.files]
    if args.json:
        json.dump(results, out, indent=2, sort_keys=False)
        out.write("\n")
    else:
        for result in results:
            name = result["file"]
            if result["ok"]:
                out.write(f"{name}: ok ({result['config']['type']})\n")
                for warning in result["warnings"]:
                    out.write(f"{name}: warning: {_where(warning)}{warning['message']}\n")
            for error in result["errors"]:
                out.write(f"{name}: {_where(error)}{error['message']}\n")
    return 0 if all(r["ok"] for r in results) else 1


def _where(problem) -> str:
    return f"{problem['path']}: " if problem["path"] else ""


def main(argv=None, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args, out, err)
    except CollectionNotFound as exc:
        err.write(f"gpufleet: {exc}\n")
        return 2
    except KeyboardInterrupt:
        err.write("gpufleet: interrupted\n")
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
