"""``gpufleet validate``: check dstack files with the collection's config model."""

from __future__ import annotations

import json

from . import common


def add_validate(commands):
    """Add ``gpufleet validate`` to the command parser."""
    validate = commands.add_parser(
        "validate",
        help="check dstack fleet, task and volume files",
        description=(
            "Check dstack configuration files (type: fleet, task, volume). Prints one line per "
            "file, 'ok' or its problems, with what gpufleet apply would refuse in a valid file "
            "and warnings for fields it accepts without acting on; exits 0 only if every file "
            "is valid and can be applied."
        ),
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="configuration files")
    validate.add_argument(
        "--json",
        action="store_true",
        help="print one JSON list with an object per file, including the normalized config",
    )
    validate.set_defaults(handler=_validate)


def _validate(args, out, err) -> int:
    from ..api import validate_file

    # The config model's verdict and what each file names on this controller (its files and
    # local repo), which apply refuses with the same messages.
    results = [validate_file(path, on_controller=True) for path in args.files]
    if args.json:
        json.dump(results, out, indent=2, sort_keys=False)
        out.write("\n")
    else:
        for result in results:
            name = common.shown_path(result["file"])
            if result["ok"] and result["runnable"]:
                out.write(f"{name}: ok ({result['config']['type']})\n")
            elif result["ok"]:
                out.write(f"{name}: valid for dstack, but gpufleet apply refuses it "
                          f"({result['config']['type']}):\n")
            for problem in result["unsupported"]:
                out.write(f"{name}: {common.where(problem)}{problem['message']}\n")
            if result["ok"]:
                for warning in result["warnings"]:
                    out.write(f"{name}: warning: {common.where(warning)}{warning['message']}\n")
            for error in result["errors"]:
                out.write(f"{name}: {common.where(error)}{error['message']}\n")
    return 0 if all(r["ok"] and r["runnable"] for r in results) else 1
