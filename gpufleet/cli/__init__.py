"""``gpufleet``: dstack-like commands over the gpufleet.cluster collection.

Every command reaches the collection through one door, gpufleet.api: ``apply``, ``fleet``,
``delete`` and ``offer`` run the collection's playbooks (fleet.yml, list.yml, delete.yml,
offer.yml...) through ansible-runner; ``ps``, ``logs``, ``stop`` and ``apply -y -d`` of a task
ask the API to answer in this process (``in_process=True``); ``validate``, ``secret``,
``token`` and ``catalog`` use its answers of this controller (``token`` runs members.yml to
publish). The tables are printed with the collection's render package (the edge), which is the
only other part of the collection imported here.
Each command group is a module of this package that adds its commands to the parser
(``add_<command>``) and handles them; a new command is a new module and a line in COMMANDS.
The commands parse arguments and present results; the logic lives in the collection.
"""

from __future__ import annotations

import argparse
import sys

from .. import __version__
from ..api import CollectionNotFound
from . import (apply, attach, events, fleets, gateways, metrics, notify, offers, runs, secrets,
               teams, tokens, usage, validate, volumes)

# In the order ``gpufleet --help`` lists them.
COMMANDS = (
    validate.add_validate,
    apply.add_apply,
    runs.add_ps,
    runs.add_logs,
    metrics.add_metrics,
    runs.add_stop,
    usage.add_usage,
    events.add_event,
    notify.add_notify,
    attach.add_attach,
    fleets.add_fleet,
    teams.add_whoami,
    tokens.add_token,
    volumes.add_volume,
    gateways.add_gateway,
    secrets.add_secret,
    apply.add_delete,
    offers.add_offer,
    offers.add_catalog,
)


class _NoAbbrevParser(argparse.ArgumentParser):
    """Every command and subcommand parser: no option abbreviations (``--fleet`` is not
    ``--fleet-file``), as dstack's parsers."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description="Run dstack-style GPU fleets and tasks with Ansible (gpufleet.cluster).",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND",
                                     parser_class=_NoAbbrevParser)
    commands.required = True
    for add in COMMANDS:
        add(commands)
    return parser


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
