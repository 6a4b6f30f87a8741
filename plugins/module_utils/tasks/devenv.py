# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A dev environment as the runner runs it: a one-node task whose commands are dstack's.

dstack's job for a dev environment (its dev configurator) runs, joined with ``&&``: the IDE
server's install when ``version`` is set, ipykernel's install, ``setup``, ``init``, the IDE link
and the SSH hint, then ``tail -f /dev/null`` so that the container stays up until stopped. The
same here, with one deliberate difference: a failed download of the IDE server (a host with no
way out) says so and goes on, since the desktop IDE installs its server on first connect and
plain SSH works without it. The link names the run and its working dir at run time
(``$DSTACK_RUN_NAME``, ``$DSTACK_WORKING_DIR``).

Pure Python: ``runnable(config)`` returns the task config the runner takes.
"""

from __future__ import annotations

from .command import quote_sh

DEV_ENVIRONMENT = "dev-environment"
KEEP_UP = "tail -f /dev/null"

# name shown, link scheme, server download URL, archive, target folder, server binary.
IDE_SERVERS = {
    "vscode": ("VS Code", "vscode",
               "https://update.code.visualstudio.com/commit:{version}/server-linux-$arch/stable",
               "vscode-server-linux-$arch.tar.gz", '~/.vscode-server/bin/"{version}"',
               "code-server"),
    "cursor": ("Cursor", "cursor",
               "https://cursor.blob.core.windows.net/remote-releases/{version}/"
               "vscode-reh-linux-$arch.tar.gz",
               "vscode-reh-linux-$arch.tar.gz",
               '~/.cursor-server/cli/servers/"Stable-{version}"/server', "cursor-server"),
    "windsurf": ("Windsurf", "windsurf",
                 "https://windsurf-stable.codeiumdata.com/linux-reh-$arch/stable/{commit}/"
                 "windsurf-reh-linux-$arch-{release}.tar.gz",
                 "windsurf-reh-linux-$arch.tar.gz", '~/.windsurf-server/bin/"{commit}"',
                 "windsurf-server"),
    "zed": ("Zed", "zed", None, None, None, None),
}
EXTENSIONS = ("ms-python.python", "ms-toolsai.jupyter")
INSTALL_IPYKERNEL = (
    "(echo 'uv pip install ipykernel...' && uv pip install -q --no-cache-dir ipykernel "
    "2> /dev/null) || (echo 'pip install ipykernel...' && pip install -q --no-cache-dir "
    "ipykernel 2> /dev/null) || echo 'no uv or pip found, ipykernel was not installed'")


def link(ide, run="$DSTACK_RUN_NAME", working_dir="$DSTACK_WORKING_DIR"):
    """The IDE's link to the dev environment, as dstack prints it."""
    scheme = IDE_SERVERS[ide][1]
    if ide == "zed":
        return "zed://ssh/%s%s" % (run, working_dir)
    return "%s://vscode-remote/ssh-remote+%s%s" % (scheme, run, working_dir)


def install_commands(ide, version):
    """The IDE server's install (one command that never fails the job), or []."""
    name, _scheme, url, archive, target, server = IDE_SERVERS[ide]
    if not version or url is None:
        return []
    release, _at, commit = version.partition("@")
    values = {"version": version, "release": release, "commit": commit or version}
    url, target = url.format(**values), target.format(**values)
    steps = [
        'if [ "$(uname -m)" = aarch64 ]; then arch=arm64; else arch=x64; fi',
        "mkdir -p /tmp",
        'wget -q "%s" -O "/tmp/%s"' % (url, archive),
        "mkdir -p %s" % target,
        'tar --no-same-owner -xz --strip-components=1 -C %s -f "/tmp/%s"' % (target, archive),
        'rm -f "/tmp/%s"' % archive,
        'PATH="$PATH":%s/bin %s %s' % (target, server, " ".join(
            "--install-extension %s" % quote_sh(e) for e in EXTENSIONS)),
    ]
    fallback = ("echo %s" % quote_sh(
        "Could not install the %s server %s here (no download?): %s installs it on first "
        "connect; ssh works without it" % (name, version, name)))
    return ["{ %s; } || %s" % ("; ".join(steps[:1]) + " && " + " && ".join(steps[1:]),
                               fallback)]


def job_commands(config):
    """The commands of a dev environment's job, in dstack's order."""
    ide = config.get("ide")
    commands = []
    if ide:
        commands += install_commands(ide, config.get("version"))
    commands.append(INSTALL_IPYKERNEL)
    commands += list(config.get("setup") or [])
    commands.append("echo")
    commands += list(config.get("init") or [])
    if ide:
        commands += [
            "echo %s" % quote_sh("To open in %s, use link below:" % IDE_SERVERS[ide][0]),
            "echo",
            'echo "  %s"' % link(ide),
            "echo",
        ]
    commands += ['echo "To connect via SSH, use: \\`ssh $DSTACK_RUN_NAME\\`"', "echo",
                 "echo 'To exit, press Ctrl+C.'", KEEP_UP]
    return commands


def runnable(config):
    """The task config the runner takes for ``config``: a dev environment becomes a one-node
    task with its job's commands (``run_type`` keeps what it was); a task is as it is."""
    if config.get("type") != DEV_ENVIRONMENT:
        return config
    return dict(config, type="task", run_type=DEV_ENVIRONMENT, nodes=1, groups=None,
                commands=job_commands(config))
