# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet ownership marker: which fleet a host belongs to, kept on the host itself.

dstack refuses to add a host that another fleet already has ("Instances [h1, h2] are already
assigned to a fleet."), judging from its own database. gpufleet has no server, so the host
carries that truth: a small JSON file, by default /etc/gpufleet/fleet.json, written when a fleet
claims the host and removed when the fleet releases it. Used by gpufleet.cluster.fleet_marker;
described in docs/preflight.md.

    result = ensure("/etc/gpufleet/fleet.json", "present", "my-fleet", instance=0,
                    hosts=["10.0.0.5", "10.0.0.6"], controller="laptop")

Pure Python; no Ansible imports. Everything raises MarkerError and nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from typing import Any, Iterable

from ..core.errors import GpufleetError
from ..core.files import write_atomically

FORMAT = 1
DEFAULT_PATH = "/etc/gpufleet/fleet.json"
DIR_MODE = 0o755
FILE_MODE = 0o644
PRESENT = "present"
ABSENT = "absent"
STATES = (PRESENT, ABSENT)

# The fields that make a claim; ``created`` and ``updated`` only record when it was made.
CLAIM_FIELDS = ("instance", "hosts", "controller")


class MarkerError(GpufleetError):
    """A marker that cannot be read or written, a host another fleet owns, or bad options.

    The message is complete and fit to show to a user as it is.
    """


def utc_now() -> str:
    """The current time as an ISO 8601 UTC timestamp, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _damaged(path, reason):
    return MarkerError(
        "the fleet marker %s is damaged (%s): remove it (sudo rm %s) and re-apply the fleet "
        "this host belongs to" % (path, reason, path)
    )


def _become_hint(exc):
    if isinstance(exc, PermissionError):
        return " (run the task with become: true)"
    return ""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def check_marker(content, path):
    """Raise MarkerError unless ``content`` (parsed JSON) is a marker this code can use."""
    if not isinstance(content, dict):
        raise _damaged(path, "a JSON %s instead of an object" % type(content).__name__)
    version = content.get("format")
    if _is_int(version) and version > FORMAT:
        raise MarkerError(
            "the fleet marker %s has format %d, newer than the format %d this gpufleet "
            "understands: use the gpufleet version that wrote it, or a newer one"
            % (path, version, FORMAT)
        )
    fleet = content.get("fleet")
    if not isinstance(fleet, str) or not fleet:
        raise _damaged(path, "no fleet name")
    if "instance" in content and not _is_int(content["instance"]):
        raise _damaged(path, "instance is %s, not a whole number" % json.dumps(content["instance"]))
    hosts = content.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise _damaged(path, "hosts is not a list of host names")


def read_marker(path: str) -> dict[str, Any] | None:
    """The marker at ``path`` as a dict, or None when there is none."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnicodeDecodeError:
        raise _damaged(path, "not UTF-8 text") from None
    except OSError as exc:
        raise MarkerError(
            "cannot read the fleet marker %s: %s%s" % (path, exc.strerror or exc, _become_hint(exc))
        ) from None
    try:
        content = json.loads(text)
    except ValueError as exc:
        raise _damaged(path, "not valid JSON: %s" % exc) from None
    check_marker(content, path)
    return content


def marker_text(content: dict[str, Any] | None) -> str:
    """The file text of a marker (None: no file, empty text)."""
    if content is None:
        return ""
    return json.dumps(content, indent=2, sort_keys=True) + "\n"


def describe_owner(marker: dict[str, Any], path: str) -> str:
    """'fleet F as instance N (marker PATH, written WHEN from CONTROLLER)'."""
    instance = marker.get("instance")
    text = "fleet %s" % marker["fleet"]
    if instance is not None:
        text += " as instance %s" % instance
    written = "marker %s" % path
    if marker.get("created"):
        written += ", written %s" % marker["created"]
    if marker.get("controller"):
        written += " from %s" % marker["controller"]
    return "%s (%s)" % (text, written)


def _check_options(state, fleet, instance, hosts, controller):
    if state not in STATES:
        raise MarkerError("state must be present or absent, got %r" % (state,))
    if not isinstance(fleet, str) or not fleet.strip():
        raise MarkerError("fleet must be the fleet's name, got %r" % (fleet,))
    if state == PRESENT and (not _is_int(instance) or instance < 0):
        raise MarkerError(
            "instance must be the host's instance number in fleet %s (a whole number, 0 or "
            "more) when state is present, got %r" % (fleet, instance)
        )
    if hosts is not None and (
        not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) and h for h in hosts)
    ):
        raise MarkerError("hosts must be a list of host names, got %r" % (hosts,))
    if controller is not None and not isinstance(controller, str):
        raise MarkerError("controller must be a host name, got %r" % (controller,))


def decide_present(previous: dict[str, Any] | None, path: str, fleet: str, instance: int,
                   hosts: Iterable[str] | None = None, controller: str | None = None,
                   force: bool = False,
                   now: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """(the marker to write or None when ``previous`` is already right, a message).

    ``hosts`` and ``controller`` left as None keep what the marker has. Raises MarkerError when
    another fleet owns the host and ``force`` is not set.
    """
    now = now or utc_now()
    taken_from = None
    if previous is not None and previous["fleet"] != fleet:
        if not force:
            raise MarkerError(
                "host is already in %s; remove it from fleet %s's ssh_config.hosts and re-apply "
                "%s, or delete fleet %s, before adding it to fleet %s (force: true takes it over)"
                % (
                    describe_owner(previous, path),
                    previous["fleet"],
                    previous["fleet"],
                    previous["fleet"],
                    fleet,
                )
            )
        taken_from = previous
        previous = None

    claim = {
        "instance": instance,
        "hosts": list(hosts) if hosts is not None else list((previous or {}).get("hosts", [])),
        "controller": controller if controller is not None else (previous or {}).get("controller"),
    }
    if previous is not None:
        if all(previous.get(key) == claim[key] for key in CLAIM_FIELDS) and (
            previous.get("format") == FORMAT
        ):
            return None, "fleet %s already claims this host as instance %d" % (fleet, instance)
        marker = dict(previous, format=FORMAT, fleet=fleet, updated=now, **claim)
        marker.setdefault("created", now)
        return marker, "updated the claim of fleet %s on this host (instance %d)" % (
            fleet,
            instance,
        )

    marker = dict(format=FORMAT, fleet=fleet, created=now, updated=now, **claim)
    if taken_from is not None:
        return marker, "took this host over for fleet %s (instance %d) from %s" % (
            fleet,
            instance,
            describe_owner(taken_from, path),
        )
    return marker, "fleet %s claimed this host as instance %d" % (fleet, instance)


def decide_absent(previous: dict[str, Any] | None, path: str, fleet: str) -> tuple[bool, str]:
    """(whether to remove the marker, a message). Another fleet's marker is never removed."""
    if previous is None:
        return False, "no fleet marker at %s" % path
    if previous["fleet"] != fleet:
        return False, "left the marker %s in place: the host belongs to %s, not to fleet %s" % (
            path,
            describe_owner(previous, path),
            fleet,
        )
    return True, "released this host from fleet %s (removed %s)" % (fleet, path)


def write_marker(path: str, content: dict[str, Any]) -> None:
    """Write the marker atomically: a temporary file in the same directory, then a rename.

    A missing directory is created with mode 0755; the file gets mode 0644.
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, DIR_MODE)
            os.chmod(directory, DIR_MODE)
        write_atomically(path, marker_text(content), FILE_MODE)
    except OSError as exc:
        raise MarkerError(
            "cannot write the fleet marker %s: %s%s"
            % (path, exc.strerror or exc, _become_hint(exc))
        ) from None


def remove_marker(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise MarkerError(
            "cannot remove the fleet marker %s: %s%s"
            % (path, exc.strerror or exc, _become_hint(exc))
        ) from None


def ensure(path: str, state: str, fleet: str, instance: int | None = None,
           hosts: Iterable[str] | None = None, controller: str | None = None, force: bool = False,
           check_mode: bool = False, now: str | None = None) -> dict[str, Any]:
    """Bring the marker at ``path`` to ``state`` for ``fleet``; return
    {"changed", "marker", "previous", "msg", "took_over"}.

    ``marker`` is the content after the change (what it would be, in check mode), None when
    there is no marker; ``previous`` the content before. ``took_over`` names the fleet a forced
    claim took the host from, else None.
    """
    _check_options(state, fleet, instance, hosts, controller)
    with _claiming(path, check_mode):
        return _ensure(path, state, fleet, instance, hosts, controller, force, check_mode, now)


@contextlib.contextmanager
def _claiming(path, check_mode):
    """Hold an exclusive ``flock`` on the marker's folder from reading the marker to writing
    it, so that two controllers claiming the host at once (for two fleets) do it one after the
    other: the second reads the first's claim and is refused, instead of both believing they
    own the host. The lock goes with the process and leaves no file. In check mode nothing is
    written and no lock is taken."""
    if check_mode:
        yield
        return
    directory = os.path.dirname(os.path.abspath(path))
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, DIR_MODE, exist_ok=True)   # two claims may make it at once
            os.chmod(directory, DIR_MODE)
        fd = os.open(directory, os.O_RDONLY)
    except OSError as exc:
        raise MarkerError(
            "cannot write the fleet marker %s: %s%s"
            % (path, exc.strerror or exc, _become_hint(exc))
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # which releases the lock


def _ensure(path, state, fleet, instance, hosts, controller, force, check_mode, now):
    """ensure's work, the marker's lock held."""
    previous = read_marker(path)
    took_over = None
    if state == PRESENT:
        marker, msg = decide_present(
            previous, path, fleet, instance, hosts, controller, force=force, now=now
        )
        changed = marker is not None
        if previous is not None and previous["fleet"] != fleet:
            took_over = previous["fleet"]
        if changed and not check_mode:
            write_marker(path, marker)
        if not changed:
            marker = previous
    else:
        changed, msg = decide_absent(previous, path, fleet)
        if changed and not check_mode:
            remove_marker(path)
        marker = None if changed else previous
    return {
        "changed": changed,
        "marker": marker,
        "previous": previous,
        "msg": msg,
        "took_over": took_over,
    }


def released_hosts(current_hosts: Iterable[str] | None, markers: Iterable[Any],
                   fleet: str | None = None) -> list[str]:
    """The hosts a fleet had but no longer lists, sorted.

    ``current_hosts``: the host names in the fleet's configuration now; ``markers``: the
    markers read from those hosts (None for a host without one). The fleet had every host
    some marker lists; those no longer in ``current_hosts`` were removed from the file and are
    to be released. With ``fleet``, markers of other fleets are ignored.
    """
    before: set[Any] = set()
    for marker in markers or []:
        if not isinstance(marker, dict):
            continue
        if fleet is not None and marker.get("fleet") != fleet:
            continue
        hosts = marker.get("hosts") or []
        before.update(h for h in hosts if isinstance(h, str))
    return sorted(before - set(current_hosts or []))
