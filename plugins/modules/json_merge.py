#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: json_merge
short_description: Merge settings into a JSON configuration file without losing other keys
version_added: 0.1.0
description:
  - Merges O(settings) into the JSON object in O(path), such as C(/etc/docker/daemon.json),
    which several tools write. Objects are merged key by key; any other value, lists included,
    is replaced by the one in O(settings). Keys that O(settings) does not name are kept.
  - O(remove) takes keys out (for example a C(default-runtime) that should no longer be set).
  - The file is rewritten only when its content changes, and then atomically, as indented
    JSON. A missing file is created (with its directory) unless O(create=false).
  - A file that is not a JSON object makes the task fail, naming the file and the parse error;
    nothing is written.
author:
  - gpufleet maintainers (@gpufleet)
options:
  path:
    description: The JSON file.
    type: path
    required: true
  settings:
    description: The keys and values to merge in.
    type: dict
    default: {}
  remove:
    description:
      - Keys to take out, each a list of keys leading into nested objects (C([runtimes, nvidia])
        removes C(nvidia) from C(runtimes)); a key that is not there is no change.
    type: list
    elements: list
    default: []
  create:
    description: Create the file (and its directory, mode C(0755)) when it is missing.
    type: bool
    default: true
  backup:
    description: Keep a copy of the file as it was, with a time stamp in its name, before changing it.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.files
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Rotate container logs and keep Docker's data on the big disk
  gpufleet.cluster.json_merge:
    path: /etc/docker/daemon.json
    settings:
      log-driver: json-file
      log-opts:
        max-size: 100m
        max-file: "3"
      data-root: /data/docker
    mode: "0644"
  notify: Restart Docker

- name: Stop making nvidia the default runtime
  gpufleet.cluster.json_merge:
    path: /etc/docker/daemon.json
    remove:
      - [default-runtime]
"""

RETURN = r"""
config:
  description: The file's content after the merge (what it would be, in check mode).
  returned: success
  type: dict
  sample: {"log-driver": "json-file", "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}
backup_file:
  description: Where the copy of the file as it was is kept, when O(backup) made one.
  returned: changed and O(backup)
  type: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.jsonmerge import (
    merge,
    parse,
    remove,
    render,
)


def _read(path):
    if not os.path.exists(path):
        return None
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8")


def _write(module, path, text):
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o755)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".json_merge.")
    with os.fdopen(fd, "wb") as handle:
        handle.write(to_bytes(text))
    module.atomic_move(tmp, path)


def _update(module, path):
    """Merge the settings into ``path`` (unless check mode); returns the module's result."""
    result = dict(changed=False)
    before_text = _read(path)
    if before_text is None and not module.params["create"]:
        module.fail_json(msg="%s does not exist and create is false" % path)
    current = parse(before_text or "", path)
    wanted = remove(merge(current, module.params["settings"]), module.params["remove"])
    after_text = render(wanted)
    result["config"] = wanted
    if before_text is None or parse(before_text, path) != wanted:
        result["changed"] = True
        result["diff"] = dict(before=before_text or "", after=after_text,
                              before_header=path, after_header=path)
        if not module.check_mode:
            if module.params["backup"] and before_text is not None:
                result["backup_file"] = module.backup_local(path)
            _write(module, path, after_text)
    if not module.check_mode and os.path.exists(path):
        file_args = module.load_file_common_arguments(module.params, path=path)
        result["changed"] = module.set_fs_attributes_if_different(
            file_args, result["changed"])
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            settings=dict(type="dict", default={}),
            remove=dict(type="list", elements="list", default=[]),
            create=dict(type="bool", default=True),
            backup=dict(type="bool", default=False),
        ),
        add_file_common_args=True,
        supports_check_mode=True,
    )
    path = module.params["path"]
    with fail_json_on_error(module, what="gpufleet json_merge"):
        try:
            result = _update(module, path)
        except OSError as exc:
            module.fail_json(msg="cannot update %s: %s" % (path, to_native(exc)))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
