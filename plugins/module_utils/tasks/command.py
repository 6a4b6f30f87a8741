# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The command of a job: the ``command.sh`` the wrapper execs inside the container.

Part of the rank plan (tasks.rankplan). Pure functions, no I/O. The task's ``commands`` (or
those of the job's group) are joined as dstack joins them, ``${{ run.args }}`` and
``${{ groups[i].nodes[j].IP_ADDRESS }}`` filled in, and run by the task's shell; with an
``entrypoint``, or with neither, the image's own ENTRYPOINT and CMD
(docs/reference/dstack-runtime.md#container-start).
"""

from __future__ import annotations

import re
import shlex

from ..spec import interpolation, support
from . import python_env
from .environment import quote_sh
from .errors import PlanError


def _find_group(config, group):
    """``(index, group)`` of a group given by name (or index, or as the group itself)."""
    groups = config.get("groups") or []
    for index, item in enumerate(groups):
        if item is group or item.get("name") == group:
            return index, item
    for index, item in enumerate(groups):
        if str(index) == str(group):
            return index, item
    raise PlanError(
        "groups: the task has no group %r; the placement and the task do not match (place the "
        "task again)" % (group,)
    )


def _join_commands(commands):
    """dstack's ``base.py::_commands``: ``c1 && c2``, with a trailing ``&`` as ``{ c & }``."""
    parts = []
    for command in commands:
        text = command.strip()
        if text.endswith("&"):
            text = "{ %s }" % text
        parts.append(text)
    return " && ".join(parts)


def _group_ip_refs(commands, field, group_ips):
    """Fill ``${{ groups[i].nodes[j].IP_ADDRESS }}`` (after the run args, as dstack does)."""

    def fill(match):
        i, j = int(match.group(1)), int(match.group(2))
        if group_ips is None or i >= len(group_ips) or j >= len(group_ips[i]):
            raise PlanError(
                "%s: ${{ groups[%d].nodes[%d].IP_ADDRESS }} names a node the run does not have; "
                "check the group index and its nodes" % (field, i, j)
            )
        ip = group_ips[i][j]
        if not ip:
            raise PlanError(
                "%s: ${{ groups[%d].nodes[%d].IP_ADDRESS }} has no value: that node's host has "
                "no internal IP; set internal_ip (or network) in the fleet's ssh_config"
                % (field, i, j)
            )
        return ip

    pattern = re.compile(
        r"\$\{\{\s*groups\[(0|[1-9][0-9]*)\]\.nodes\[(0|[1-9][0-9]*)\]\.IP_ADDRESS\s*\}\}"
    )
    return [pattern.sub(fill, c) for c in commands]


def _interpolate_commands(commands, field, run_args, group_ips):
    args = shlex.join(list(run_args or ())) if run_args else ""
    out = []
    for index, command in enumerate(commands):
        where = "%s[%d]" % (field, index)
        try:
            text = interpolation.interpolate(
                command, {"run": {"args": args}}, keep=("secrets", "groups")
            )
        except interpolation.InterpolationError as exc:
            raise PlanError("%s: %s" % (where, exc)) from exc
        out.append(_group_ip_refs([text], where, group_ips)[0])
    return out


def _shell_check(shell):
    return (
        "if [ ! -x %s ]; then echo %s >&2; exit 127; fi\n"
        % (
            quote_sh(shell),
            quote_sh(
                "gpufleet: the shell %s is not in the image; set shell: sh (or an absolute path "
                "that exists in the image)" % shell
            ),
        )
    )


def command_script(config, group=None, image_cmd=None, run_args=(), group_ips=None,
                   python_setup=None):
    """The ``command.sh`` of a job: POSIX sh that execs the job's process
    (docs/reference/dstack-runtime.md#container-start).

    ``commands`` run as ``<shell> -c 'c1 && c2'``; with ``entrypoint``, the entrypoint's words
    followed by the commands; with neither, ``image_cmd`` (the image's ENTRYPOINT + CMD).
    ``run_args`` fill ``${{ run.args }}``; ``group_ips[i][j]`` fills
    ``${{ groups[i].nodes[j].IP_ADDRESS }}``; dstack's default images' own commands come first
    (tasks.python_env.image_commands: ``start-dockerd`` with ``docker``, else the venv that
    ``python_setup``, from tasks.python_env.choose, describes).
    """
    field = "commands"
    commands = config.get("commands") or []
    if group is not None and config.get("groups"):
        index, found = _find_group(config, group)
        commands = found.get("commands") or []
        field = "groups[%d].commands" % index
    commands = _interpolate_commands(commands, field, run_args, group_ips)
    entrypoint = config.get("entrypoint")
    header = "#!/bin/sh\n# Written by gpufleet: the job's process.\n"
    if entrypoint:
        why = support.entrypoint_refusal(entrypoint)   # what gpufleet validate reports too
        if why:
            raise PlanError("entrypoint: %s" % why)
        words = shlex.split(entrypoint)
        argv = words + commands
        return header + "exec " + " ".join(quote_sh(w) for w in argv) + "\n"
    if commands:
        commands = python_env.image_commands(config, python_setup) + commands
        shell = config.get("shell") or "/bin/sh"
        return (
            header
            + _shell_check(shell)
            + "exec %s -c %s\n" % (quote_sh(shell), quote_sh(_join_commands(commands)))
        )
    if image_cmd:
        return header + "exec " + " ".join(quote_sh(w) for w in image_cmd) + "\n"
    raise PlanError(
        "Could not determine what command to run: set commands or entrypoint, or use an image "
        "with an ENTRYPOINT/CMD"
    )


def needs_image_cmd(config, group):
    """Whether the job runs the image's own ENTRYPOINT and CMD (no commands, no entrypoint)."""
    if config.get("entrypoint"):
        return False
    if group is not None and config.get("groups"):
        return not _find_group(config, group)[1].get("commands")
    return not config.get("commands")
