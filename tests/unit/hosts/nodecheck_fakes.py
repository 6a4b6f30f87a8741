# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake host for the component checks: files, commands and HTTP answers from dictionaries."""

from __future__ import annotations

import posixpath

from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks._system import (
    NodeSystem,
)


class FakeNode(NodeSystem):
    """``files``: {path: text}; ``links``: {path: target}; ``commands``: {tuple(argv): (rc, out,
    err)} (argv without the binary's directory); ``bins``: names on PATH; ``http``:
    {(method, url): (status, text)}. Every command and request is recorded in ``calls``."""

    def __init__(self, files=None, links=None, commands=None, bins=(), http=None):
        self.files = dict(files or {})
        self.links = dict(links or {})
        self.commands = dict(commands or {})
        self.bins = set(bins)
        self.http = dict(http or {})
        self.calls = []
        NodeSystem.__init__(self, run=self._run, which=self._which, fetch=self._fetch)

    def _run(self, argv, **_kwargs):
        self.calls.append(tuple(argv))
        return self.commands.get(tuple(argv), (127, "", "%s: not found" % argv[0]))

    def _which(self, name, required=False):
        return "/usr/bin/" + name if name in self.bins else None

    def _fetch(self, url, method="GET", headers=None, timeout=2):
        self.calls.append((method, url, tuple(sorted((headers or {}).items()))))
        return self.http.get((method, url), (None, "connection refused"))

    def exists(self, path):
        return path in self.files or path in self.links or any(
            f.startswith(path.rstrip("/") + "/") for f in self.files)

    def read_text(self, path):
        if path not in self.files:
            raise IOError("no such file: %s" % path)
        return self.files[path]

    def listdir(self, path):
        prefix = path.rstrip("/") + "/"
        names = set()
        for name in list(self.files) + list(self.links):
            if name.startswith(prefix):
                names.add(name[len(prefix):].split("/", 1)[0])
        return sorted(names)

    def resolve(self, link):
        target = self.links.get(link)
        return posixpath.normpath(posixpath.join(posixpath.dirname(link), target)) \
            if target else None
