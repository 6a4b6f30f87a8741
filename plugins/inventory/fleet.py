# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: fleet
short_description: Hosts from dstack fleet files and the live state of their backends
version_added: 0.1.0
description:
  - "Turns dstack fleet configurations (C(type: fleet)) into inventory, one host per fleet
    instance, named C(<fleet>-<n>) as dstack names instances."
  - "Two kinds of source: a configuration file whose name ends in C(.gpufleet.yml) or
    C(.gpufleet.yaml), with C(plugin: gpufleet.cluster.fleet) and a list of O(fleets); or a
    dstack fleet file itself, whose name ends in C(.dstack.yml) or C(.dstack.yaml) (files of
    other types are left to other plugins)."
  - SSH fleet hosts come from C(ssh_config.hosts), numbered by their place in the list. Backend
    fleet hosts come from the backend's live state (for C(local), the labels of the node
    containers on this machine's Docker engine; for C(aws), the instances tagged with the
    fleet's name in the regions of the backend settings); a backend fleet that has not been
    applied has no hosts.
  - "Groups: C(gpufleet) (every host), C(fleet_<name>) per fleet, C(backend_<backend>)
    (C(backend_ssh), C(backend_local), C(backend_aws)), C(gpu_<vendor>) from the detected GPUs when cached, else
    from the vendor the fleet's resources ask for, and C(cluster) for hosts of
    C(placement: cluster) fleets. Characters other than letters, digits and underscores become
    underscores."
  - "Host variables: C(ansible_host), C(ansible_port), C(ansible_user),
    C(ansible_ssh_private_key_file), C(ansible_ssh_common_args) (with the jump host as a
    C(ProxyCommand)), C(ansible_control_path) (one multiplexed SSH connection per route to
    the host), and C(gpufleet_fleet), C(gpufleet_instance), C(gpufleet_instance_num),
    C(gpufleet_backend), C(gpufleet_region), C(gpufleet_instance_type), C(gpufleet_price),
    C(gpufleet_spot), C(gpufleet_internal_ip), C(gpufleet_network), C(gpufleet_blocks),
    C(gpufleet_placement), C(gpufleet_proxy_jump), C(gpufleet_created); C(gpufleet_host) holds
    the host facts (see M(gpufleet.cluster.host_facts)) when C(playbooks/fleet.yml) has cached
    them."
  - With caching on, the backends' answers (node containers, instance records) are cached,
    never the groups or variables made from them, so a changed fleet file takes effect at once
    and a warm cache makes no cloud API call.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.constructed
  - ansible.builtin.inventory_cache
options:
  plugin:
    description:
      - The name of this plugin; required in C(.gpufleet.yml) files.
    type: str
    required: true
    choices: [gpufleet.cluster.fleet]
  fleets:
    description:
      - The fleets, each either the path of a dstack fleet file (relative paths are taken from
        the directory of this inventory file) or a fleet configuration written inline, as the
        mapping a dstack file holds (it must have a C(name)).
    type: list
    elements: raw
    default: []
  state_dir:
    description:
      - Where the controller keeps each fleet's key, known hosts and cached facts; the same
        directory the C(gpufleet.cluster.fleet) module uses.
      - Defaults to E(GPUFLEET_STATE_DIR), else C($XDG_DATA_HOME/gpufleet), else
        C(~/.local/share/gpufleet).
    type: path
    env:
      - name: GPUFLEET_STATE_DIR
  backend_settings:
    description:
      - Settings of the cloud backends, by backend, as M(gpufleet.cluster.fleet) takes them;
        C(aws.regions) above all, the regions where the instances are looked for.
      - Defaults to the contents of C(backends.yml) in O(state_dir), else none. Credentials come
        from the environment, as AWX injects them into inventory updates.
    type: dict
"""

EXAMPLES = r"""
# inventory/fleets.gpufleet.yml
plugin: gpufleet.cluster.fleet
fleets:
  - ../fleets/onprem.dstack.yml
  - type: fleet
    name: scratch
    nodes: 2
    backends: [local]
keyed_groups:
  - key: gpufleet_host.gpu.name | default('none')
    prefix: gpu_model
compose:
  ansible_become: true

# Or point at a dstack fleet file directly:
#   ansible-inventory -i onprem.dstack.yml --graph
"""

import os

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import base, local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import (
    Docker,
    DockerError,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.errors import (
    UnsupportedBackend,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import (
    cloud,
    records,
    state,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec.naming import (
    NamingError,
    fleet_name,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import (
    HAS_YAML,
    SpecError,
    parse_hosts_data,
    parse_hosts_file,
)

CONFIG_SUFFIXES = (".gpufleet.yml", ".gpufleet.yaml")
DSTACK_SUFFIXES = (".dstack.yml", ".dstack.yaml")


def _is_fleet_file(path):
    """A cheap look at a dstack file: does it say ``type: fleet``?"""
    try:
        with open(path, "rb") as handle:
            head = handle.read(65536).decode("utf-8", "replace")
    except OSError:
        return False
    for line in head.splitlines():
        stripped = line.split("#", 1)[0].rstrip()
        if stripped.startswith("type:"):
            return stripped[len("type:"):].strip().strip("'\"") == "fleet"
    return False


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):

    NAME = "gpufleet.cluster.fleet"

    def verify_file(self, path):
        if not super(InventoryModule, self).verify_file(path):
            return False
        lowered = path.lower()
        if lowered.endswith(CONFIG_SUFFIXES):
            return True
        return lowered.endswith(DSTACK_SUFFIXES) and _is_fleet_file(path)

    def _read_dstack_source(self):
        """Options for a dstack file given as the source: defaults, env and ini settings."""
        self.set_options(direct={"plugin": self.NAME}, var_options=self._vars)
        if self.get_option("cache"):
            self.load_cache_plugin()

    def parse(self, inventory, loader, path, cache=True):
        super(InventoryModule, self).parse(inventory, loader, path, cache)
        if not HAS_YAML:
            raise AnsibleParserError("the gpufleet.cluster.fleet inventory plugin needs PyYAML")
        base_dir = os.path.dirname(os.path.abspath(path))
        if path.lower().endswith(DSTACK_SUFFIXES):
            self._read_dstack_source()
            sources = [os.path.abspath(path)]
        else:
            self._read_config_data(path)
            sources = self.get_option("fleets")
            if not isinstance(sources, list) or not sources:
                raise AnsibleParserError(
                    "%s: fleets: list at least one fleet file or inline fleet configuration"
                    % path
                )
        fleets = [self._read_fleet(path, base_dir, index, item)
                  for index, item in enumerate(sources)]
        root = state.state_dir(self.get_option("state_dir"))
        fleets = self._with_backends(path, fleets, root)
        answers = self._backend_answers(path, fleets, cache, root)
        for config, fleet_path, name in fleets:
            self._add_fleet(config, fleet_path, name, root, answers)

    def _read_fleet(self, source, base_dir, index, item):
        try:
            if isinstance(item, str):
                fleet_path = item if os.path.isabs(item) else os.path.join(base_dir, item)
                fleet_path = os.path.normpath(os.path.expanduser(fleet_path))
                config, warnings = parse_hosts_file(fleet_path)
                where = fleet_path
            elif isinstance(item, dict):
                fleet_path = None
                where = "%s: fleets[%d]" % (source, index)
                config, warnings = parse_hosts_data(_plain(item), where)
            else:
                raise AnsibleParserError(
                    "%s: fleets[%d]: expected a fleet file path or an inline fleet "
                    "configuration, got %s" % (source, index, type(item).__name__)
                )
            name = fleet_name(config, fleet_path)
        except (SpecError, NamingError) as exc:
            raise AnsibleParserError(str(exc)) from exc
        for warning in warnings:
            self.display.warning("%s: %s" % (where, warning))
        return config, fleet_path, name

    def _with_backends(self, path, fleets, root):
        """Backend fleets without ``backends`` get the ones apply builds them with
        (base.default_backends: the configured cloud backends, else local)."""
        if not any(c["fleet_type"] == "backend" and not c.get("backends")
                   for c, _p, _n in fleets):
            return fleets
        try:
            settings = state.backend_settings(root, self.get_option("backend_settings"))
        except state.StateError as exc:
            raise AnsibleParserError("%s: %s" % (path, exc)) from exc
        out = []
        for config, fleet_path, name in fleets:
            if config["fleet_type"] == "backend" and not config.get("backends"):
                config = dict(config, backends=base.default_backends(
                    config, settings, catalog.directory(root)))
            out.append((config, fleet_path, name))
        return out

    def _backend_answers(self, path, fleets, cache, root):
        """The backends' live state (cached when caching is on): ``{"local": [nodes],
        "aws": {fleet: [instance records]}}``."""
        backend_fleets = [(config, name) for config, _p, name in fleets
                          if config["fleet_type"] == "backend"]
        if not backend_fleets:
            return {}
        use_cache = self.get_option("cache") and cache
        key = self.get_cache_key(path)
        if use_cache:
            try:
                return self._cache[key]
            except KeyError:
                pass
        answers = {}
        if any(fleet_backend(c, n) not in base.CLOUD_BACKENDS for c, n in backend_fleets):
            try:
                docker = Docker()
                docker.ping()
                answers["local"] = local.list_nodes(docker)
            except DockerError as exc:
                self.display.warning(
                    "%s: the local fleets' nodes cannot be listed, so they have no hosts: %s"
                    % (path, exc)
                )
                answers["local"] = []
        cloud_fleets = [(c, n) for c, n in backend_fleets
                        if fleet_backend(c, n) in base.CLOUD_BACKENDS]
        if cloud_fleets:
            try:
                settings = state.backend_settings(root, self.get_option("backend_settings"))
            except state.StateError as exc:
                raise AnsibleParserError("%s: %s" % (path, exc)) from exc
            for config, name in cloud_fleets:
                backend = fleet_backend(config, name)
                try:
                    found = cloud.describe(config, name, state.key_path(root, name), settings,
                                           catalog_dir=catalog.directory(root))
                except (cloud.CloudError, catalog.CatalogError) as exc:
                    self.display.warning("%s: the instances of fleet %s cannot be listed, so it "
                                         "has no hosts: %s" % (path, name, exc))
                    found = []
                answers.setdefault(backend, {})[name] = found
        if self.get_option("cache"):
            self._cache[key] = answers
        return answers

    def _add_fleet(self, config, fleet_path, name, root, answers):
        if config["fleet_type"] == "ssh":
            base_dir = os.path.dirname(fleet_path) if fleet_path else None
            instances = records.ssh_instances(config, name, base_dir)
            # The hosts' keys are recorded on first contact, which may come from this
            # inventory: the known_hosts folder must be there before it.
            try:
                state.ensure_known_hosts_dir(root, name)
            except state.StateError as exc:
                raise AnsibleParserError("%s: %s" % (fleet_path or name, exc)) from exc
        elif fleet_backend(config, name) in base.CLOUD_BACKENDS:
            instances = (answers.get(fleet_backend(config, name)) or {}).get(name) or []
        else:
            instances = local.instance_records(
                answers.get("local") or [], name, config.get("blocks", 1),
                state.key_path(root, name),
            )
        vendor = records.spec_gpu_vendor(config)
        self.inventory.add_group(records.fleet_group(name))
        strict = self.get_option("strict")
        cached = state.read_facts(root, name)
        for instance in instances:
            if not instance.get("hostname"):
                continue
            # The same host, groups and variables as the fleet module returns (records.host_entry).
            entry = records.host_entry(instance, root, vendor, cached.get(instance["name"]))
            host, variables = entry["name"], entry["vars"]
            self.inventory.add_host(host)
            for group in entry["groups"]:
                self.inventory.add_group(group)
                self.inventory.add_child(group, host)
            for key, value in variables.items():
                self.inventory.set_variable(host, key, value)
            self._set_composite_vars(self.get_option("compose"), variables, host, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), variables, host,
                                              strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), variables, host,
                                           strict=strict)


def fleet_backend(config, name):
    """The backend that holds the backend fleet ``name``: the one apply builds it with
    (backends.base.select). A fleet whose ``backends`` gpufleet cannot provision was never
    built; its hosts are looked for among the local nodes, as for any fleet not in a cloud."""
    try:
        return base.select(config, name)
    except UnsupportedBackend:
        return "local"


def _plain(value):
    """Inline configurations as plain Python values (the YAML loader may hand over subclasses)."""
    if isinstance(value, dict):
        return dict((str(k), _plain(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value
