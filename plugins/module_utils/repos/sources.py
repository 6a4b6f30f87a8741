# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a run's configuration names on the controller, judged before anything ships: each
``files`` entry (repos.files) and a local repo (repos.local).

The one place this is decided: ``gpufleet validate`` and the ``config_info`` module report it
(``validate_file``, spec.validate_file's object with these refusals added to ``unsupported``),
and tasks.actions refuses a submission on the same Problems before any host is touched. The
field paths and messages are spec.support's kind: ``files[0]``, ``repos[0].local_path``.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from .. import spec
from ..spec import Problem
from . import files as shipped
from . import local

RUN_TYPES = ("task", "dev-environment", "service")


def local_refusals(config: dict[str, Any], base_dir: str | None = None,
                   environ: Mapping[str, str] | None = None) -> list[Problem]:
    """Problems with what a run (task, dev environment, service) names on this controller: each
    ``files`` entry's local path (it exists, is a file or a folder this user can read, within the
    upload limit) and a local repo (a folder, within the limit). Relative paths start at
    ``base_dir`` (the file's folder; else the current one); ``environ`` holds
    ``DSTACK_SERVER_CODE_UPLOAD_LIMIT``."""
    if config.get("type") not in RUN_TYPES:
        return []
    out = []
    for index, item in enumerate(config.get("files") or []):
        if not item.get("local_path"):
            continue
        try:
            shipped.check(item["local_path"], base_dir, environ)
        except shipped.FilesError as exc:
            out.append(Problem(("files", index), str(exc)))
    repos = config.get("repos") or []
    if repos and repos[0].get("local_path") and not repos[0].get("url"):
        try:
            root = local.resolve(repos[0]["local_path"], base_dir, field=None)
            local.snapshot(root).check_limit(environ, field=None)
        except local.RepoError as exc:
            out.append(Problem(("repos", 0, "local_path"), str(exc)))
    return out


def validate_file(path: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """spec.validate_file's object for ``path``, with ``local_refusals`` (relative paths from
    the file's folder; ``environ``: the process's environment by default) in ``unsupported``."""
    result = spec.validate_file(path)
    if result["ok"]:
        found = local_refusals(result["config"], os.path.dirname(os.path.abspath(path)),
                               os.environ if environ is None else environ)
        if found:
            result["unsupported"] = result["unsupported"] + [p.as_dict() for p in found]
            result["runnable"] = False
    return result
