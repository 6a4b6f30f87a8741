# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the controller keeps what a fleet needs locally.

The truth about a fleet lives with its resources (container labels, cloud tags, a marker file on
SSH hosts). The controller keeps only what cannot live there and caches:

    <state dir>/fleets/<fleet>/id_ed25519[.pub]   the key of a backend fleet's nodes
    <state dir>/fleets/<fleet>/known_hosts        host keys seen on first contact
    <state dir>/fleets/<fleet>/facts.json         the last host facts by host (a cache for inventory)
    <state dir>/fleets/<fleet>/facts.lock         held while a command changes facts.json

The state dir is ``$GPUFLEET_STATE_DIR``, else ``$XDG_DATA_HOME/gpufleet``, else
``~/.local/share/gpufleet``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
from typing import Any, Callable, Mapping

from ..core.errors import GpufleetError
from ..core.files import locked, write_atomically

try:
    import yaml
except ImportError:  # pragma: no cover - ansible-core needs PyYAML
    yaml = None  # type: ignore[assignment]

BACKEND_SETTINGS = "backends.yml"

# The facts cache is the owner's alone: it describes the hosts (addresses, devices).
FACTS_MODE = 0o600

ENV = "GPUFLEET_STATE_DIR"


class StateError(GpufleetError):
    """The state dir cannot be used; the message names the path and what to do."""


def state_dir(override: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    if override:
        return os.path.abspath(os.path.expanduser(override))
    if environ.get(ENV):
        return os.path.abspath(os.path.expanduser(environ[ENV]))
    data_home = environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(os.path.abspath(data_home), "gpufleet")


def fleet_dir(root: str, fleet: str) -> str:
    return os.path.join(root, "fleets", fleet)


def key_path(root: str, fleet: str) -> str:
    return os.path.join(fleet_dir(root, fleet), "id_ed25519")


def known_hosts_path(root: str, fleet: str) -> str:
    return os.path.join(fleet_dir(root, fleet), "known_hosts")


def ensure_known_hosts_dir(root: str, fleet: str) -> str:
    """Make the folder of a fleet's known_hosts before the first connection to its hosts, and
    return the file's path: OpenSSH records a host's key on first contact only where the file
    can be made, and without a record every later key would be taken as new."""
    ensure_fleet_dir(root, fleet)
    return known_hosts_path(root, fleet)


def facts_path(root: str, fleet: str) -> str:
    return os.path.join(fleet_dir(root, fleet), "facts.json")


def file_path(root: str, fleet: str) -> str:
    """Where the path of the fleet's file is remembered (a cache: SSH fleets live only in their
    files, and this lets ``gpufleet ps`` and task placement find them without being told)."""
    return os.path.join(fleet_dir(root, fleet), "fleet-file")


def remember_file(root: str, fleet: str, path: str) -> None:
    """Note the file a fleet was applied from (see ``file_path``)."""
    ensure_fleet_dir(root, fleet)
    target = file_path(root, fleet)
    text = os.path.abspath(path) + "\n"
    try:
        with open(target) as handle:
            if handle.read() == text:
                return
    except OSError:
        pass
    with open(target, "w") as handle:
        handle.write(text)


def inline_path(root: str, fleet: str) -> str:
    """Where a fleet given inline (as data, not a file) is kept once applied."""
    return os.path.join(fleet_dir(root, fleet), "inline.dstack.yml")


def save_inline(root: str, fleet: str, data: dict[str, Any]) -> str:
    """Keep a fleet given inline as a file in its state dir and remember it as the fleet's file
    (tasks, ``ps`` and reconcile then find it as they find applied files). Returns the path."""
    if yaml is None:
        raise StateError("keeping the inline fleet %s needs PyYAML" % fleet)
    ensure_fleet_dir(root, fleet)
    path = inline_path(root, fleet)
    text = yaml.safe_dump(data, default_flow_style=False, sort_keys=False)
    try:
        with open(path) as handle:
            same = handle.read() == text
    except OSError:
        same = False
    if not same:
        with open(path, "w") as handle:
            handle.write(text)
    remember_file(root, fleet, path)
    return path


def backend_settings(root: str, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """The cloud backends' settings: ``given`` (a playbook's variable) when set, else
    ``<state dir>/backends.yml`` when there is one, else none (``{}``)."""
    if given:
        return given
    path = os.path.join(root, BACKEND_SETTINGS)
    if not os.path.exists(path):
        return {}
    if yaml is None:
        raise StateError("%s needs PyYAML to be read" % path)
    try:
        with open(path) as handle:
            data = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise StateError("%s cannot be read: %s" % (path, exc)) from exc
    if not isinstance(data, dict):
        raise StateError("%s must hold a mapping of backend names to settings, e.g. "
                         "aws: {regions: [us-east-1]}" % path)
    return data


def remembered_files(root: str) -> dict[str, str]:
    """``{fleet: file}`` for every fleet whose file this controller applied and still exists."""
    found: dict[str, Any] = {}
    base = os.path.join(root, "fleets")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return found
    for name in names:
        try:
            with open(file_path(root, name)) as handle:
                path = handle.read().strip()
        except OSError:
            continue
        if path and os.path.isfile(path):
            found[name] = path
    return found


def ensure_fleet_dir(root: str, fleet: str) -> str:
    path = fleet_dir(root, fleet)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise StateError(
            "cannot create %s (%s): set %s to a writable directory" % (path, exc.strerror, ENV)
        ) from exc
    return path


def ensure_key(root: str, fleet: str, check_mode: bool = False) -> tuple[str, str | None, bool]:
    """The fleet's SSH key pair, made with ssh-keygen when missing. Returns (path, public, made)."""
    path = key_path(root, fleet)
    if os.path.exists(path) and os.path.exists(path + ".pub"):
        with open(path + ".pub") as handle:
            return path, handle.read().strip(), False
    if check_mode:
        return path, None, True
    ensure_fleet_dir(root, fleet)
    keygen = shutil.which("ssh-keygen")
    if not keygen:
        raise StateError(
            "ssh-keygen was not found: install the OpenSSH client (on Debian/Ubuntu: "
            "sudo apt-get install -y openssh-client)"
        )
    for stale in (path, path + ".pub"):
        if os.path.exists(stale):
            os.remove(stale)
    proc = subprocess.run(
        [keygen, "-q", "-t", "ed25519", "-N", "", "-C", "gpufleet-" + fleet, "-f", path],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False,
    )
    if proc.returncode != 0:
        raise StateError(
            "ssh-keygen could not make the key of fleet %s at %s: %s"
            % (fleet, path, proc.stdout.decode("utf-8", "replace").strip())
        )
    with open(path + ".pub") as handle:
        return path, handle.read().strip(), True


def remove_fleet_dir(root: str, fleet: str, check_mode: bool = False) -> bool:
    """Remove the fleet's key, known hosts and cached facts. Returns True if anything was there."""
    path = fleet_dir(root, fleet)
    if not os.path.exists(path):
        return False
    if not check_mode:
        shutil.rmtree(path)
    return True


def read_facts(root: str, fleet: str) -> dict[str, dict[str, Any]]:
    """Cached host facts of a fleet, ``{host: facts}``; empty when missing or unreadable."""
    try:
        with open(facts_path(root, fleet)) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return dict((k, v) for k, v in data.items() if isinstance(v, dict))


def facts_text(facts: dict[str, Any]) -> str:
    """The facts cache's text: indented ASCII JSON with sorted keys (as ``to_nice_json`` makes
    it, which wrote the cache before)."""
    return json.dumps(facts, indent=4, sort_keys=True, separators=(",", ": "))


def update_facts(root: str, fleet: str, changes: dict[str, dict[str, Any]],
                 check_mode: bool = False) -> bool:
    """Merge ``{host: {key: value}}`` into the cached facts of hosts already in the cache (a
    host not in it stays out: only an apply puts hosts there). Returns whether the file
    changed."""
    def merge(facts):
        merged = dict(facts)
        for host, keys in (changes or {}).items():
            if host in merged and keys:
                merged[host] = dict(merged[host], **keys)
        return merged

    return edit_facts(root, fleet, merge, check_mode=check_mode)


def edit_facts(root: str, fleet: str, edit: Callable[[dict[str, Any]], dict[str, Any]],
               check_mode: bool = False) -> bool:
    """Replace a fleet's cached facts with ``edit(facts)`` (the cache as read), holding this
    machine's lock on the file from the read to the write, so that two commands changing
    different keys (a health read, a host found silent, an apply's facts) never lose each
    other's change. Returns whether the file changed."""
    with _facts_lock(root, fleet):
        facts = read_facts(root, fleet)
        edited = edit(facts)
        if edited == facts:
            return False
        return _write_facts(root, fleet, edited, check_mode)


@contextlib.contextmanager
def _facts_lock(root, fleet):
    """An exclusive ``flock`` on ``facts.lock`` beside the fleet's facts.json, held while the
    block runs (every process that sees the state dir, whatever its path or temporary
    directory, takes the same file). Without the fleet's folder there is nothing to guard:
    a write makes the folder first."""
    folder = fleet_dir(root, fleet)
    with contextlib.ExitStack() as held:
        if os.path.isdir(folder):
            try:
                held.enter_context(locked(os.path.join(folder, "facts.lock")))
            except OSError as exc:
                raise StateError("cannot lock the facts of fleet %s in %s: set %s to a "
                                 "writable directory" % (fleet, folder, ENV)) from exc
        yield


def write_facts(root: str, fleet: str, facts: dict[str, Any], check_mode: bool = False) -> bool:
    """Cache the host facts of a fleet, ``{host: facts}``, where ``read_facts`` finds them.

    The file is replaced atomically (a reader sees the old cache or the new one, never a part)
    and is readable by its owner only. It is left alone when it already holds ``facts`` with that
    mode. Returns whether the file changed; in check mode, whether it would, writing nothing.
    """
    with _facts_lock(root, fleet):
        return _write_facts(root, fleet, facts, check_mode)


def _write_facts(root, fleet, facts, check_mode=False):
    path = facts_path(root, fleet)
    try:
        with open(path, encoding="utf-8") as handle:
            current = json.load(handle)
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except (OSError, ValueError):
        current, mode = None, None
    if current == facts and mode == FACTS_MODE:
        return False
    if check_mode:
        return True
    ensure_fleet_dir(root, fleet)
    try:
        write_atomically(path, facts_text(facts), FACTS_MODE)
    except OSError as exc:
        raise StateError("cannot write %s (%s): set %s to a writable directory"
                         % (path, exc.strerror, ENV)) from exc
    return True
