# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The contract every backend client keeps (local.Local, aws.Aws, gcp.Gcp).

A backend holds a fleet's instances and nothing else records them: labels (Docker, GCP) or tags
(EC2) on the instances are the truth. So every backend answers the same questions of a fleet
by its name, and fleets/apply.py and fleets/cloud.py converge any fleet with them:

    placed = client.fleet_instances(fleet, regions)   # the fleet's instances, raw
    client.view(item)            # {"num", "state", "placement", ...} of one raw instance
    client.records(placed, fleet, key_file)           # instance records (fleets/records.py)
    client.start(placed)         # start stopped instances
    client.terminate(placed)     # remove instances
    client.delete_fleet(fleet, regions, check_mode)   # everything of the fleet: {kind: [ids]}
    client.all_fleet_instances(regions)               # {fleet: placed} of every fleet held
    client.fleet_members(fleet, placed)               # {user: mark} published (fleets/access)
    client.set_member(fleet, placed, user, mark)      # publish (mark) or withdraw (None)

What a raw instance is differs by backend (a node as ``docker inspect`` tells it, an EC2
instance with its region, a Compute Engine instance with its zone); only the backend itself
reads one, and the fleets code passes them back unopened. ``regions`` are where to look: the
local backend has one place, this machine, and ignores them.

Making instances is not shared: a local node is a container from the node image, a cloud
instance is launched from an offer. The cloud backends add launching, reservations and network
volumes (CloudBackend below); the local backend has its own ``create``.

Registry, the choice of a fleet's backend, and client construction are in base.py.
"""

from __future__ import annotations

from typing import Any, Iterable


class Backend:
    """One backend's client. Subclasses set ``name`` and implement every method here."""

    name: str | None = None

    def fleet_instances(self, fleet: str,
                        regions: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The raw instances of ``fleet`` that are not gone, found by their labels or tags."""
        raise NotImplementedError

    def all_fleet_instances(
            self, regions: Iterable[str] | None = None,
    ) -> dict[str, list[dict[str, Any]]]:
        """``{fleet name: [raw instance]}`` of every gpufleet fleet this backend holds."""
        raise NotImplementedError

    def view(self, placed: Any) -> dict[str, Any]:
        """What the fleets code needs of one raw instance: at least ``num`` (the instance's
        number, None when unreadable), ``state`` (as fleets/plan.py reads it: a state in
        plan.SERVABLE_STATES can serve again, one in plan.STOPPED_STATES is started) and
        ``placement``."""
        raise NotImplementedError

    def records(self, placed: list[Any], fleet: str,
                key_file: str) -> list[dict[str, Any]]:
        """Instance records (fleets/records.py) of the fleet's raw instances, by number;
        ``key_file`` is the fleet's private key, for the records' ``identity_file``."""
        raise NotImplementedError

    def start(self, placed: list[Any]) -> None:
        """Start the stopped instances among ``placed``."""
        raise NotImplementedError

    def terminate(self, placed: list[Any]) -> None:
        """Remove the instances ``placed`` (and what each of them alone used)."""
        raise NotImplementedError

    def delete_fleet(self, fleet: str, regions: Iterable[str] | None = None,
                     check_mode: bool = False) -> dict[str, list[str]]:
        """Remove the fleet's instances and everything made for it. Returns what was (in
        check mode: would be) removed, as ``{kind: [names or ids]}``."""
        raise NotImplementedError

    # A fleet's published members (fleets/access.py): which users' keys its hosts let in,
    # kept where the backend keeps metadata that can change after an instance is made, so a
    # controller tells whether it may reach a fleet without trying it over SSH. A member's
    # ``mark`` is what the backend stores for the fingerprint of their key (``member_mark``).
    @staticmethod
    def member_mark(fingerprint: str) -> str:
        """What this backend stores for a key's fingerprint (``SHA256:...``)."""
        return fingerprint

    def fleet_members(self, fleet: str, placed: list[Any]) -> dict[str, str]:
        """``{user: mark}`` of the members published for ``fleet`` (``placed``: its raw
        instances, as fleet_instances gave them)."""
        raise NotImplementedError

    def set_member(self, fleet: str, placed: list[Any], user: str, mark: str | None) -> bool:
        """Publish ``user``'s ``mark`` for ``fleet`` on every instance in ``placed`` (or the
        fleet's one place), or withdraw it with None. Returns whether anything changed."""
        raise NotImplementedError


class VolumeBackend:
    """Network volumes (volumes/provision.py, volumes/attach.py): kept by the cloud backends
    (EBS volumes, persistent disks) and by the local one (local_volumes.Pool: folders in a
    Docker volume, attached to one node at a time). ``region`` is ``local`` there."""

    def volume(self, name: str, region: str) -> dict[str, Any] | None:
        """The cloud's description of the gpufleet volume ``name``, or None."""
        raise NotImplementedError

    def all_volumes(self, regions: Iterable[str]) -> list[tuple[str, str, dict[str, Any]]]:
        """``[(name, region, description)]`` of every gpufleet volume in ``regions``, the
        description as ``volume`` gives it (volumes/listing.py)."""
        raise NotImplementedError

    def first_zone(self, region: str) -> str | None:
        """A zone of ``region`` to create a volume in when the config names none."""
        raise NotImplementedError

    def create_volume(self, name: str, region: str, zone: str | None, size_gb: int,
                      config_tags: dict[str, str] | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def register_volume(self, name: str, region: str, volume_id: str) -> dict[str, Any] | None:
        """Mark an existing volume as the gpufleet volume ``name`` (external: kept on delete)."""
        raise NotImplementedError

    def delete_volume(self, name: str, region: str, volume: dict[str, Any]) -> None:
        raise NotImplementedError

    def host_instance(self, record: dict[str, Any]) -> Any:
        """The raw instance behind an instance record, for attaching volumes to it."""
        raise NotImplementedError

    def attach_volume(self, name: str, region: str, volume: dict[str, Any],
                      instance: Any) -> Any:
        raise NotImplementedError

    def detach_volume(self, name: str, region: str, volume: dict[str, Any]) -> None:
        raise NotImplementedError


class CloudBackend(Backend, VolumeBackend):
    """A cloud backend's client, made from its section of the backend settings
    (``settings`` after construction: the section over the backend's defaults)."""

    settings = None

    def launch_group(self, fleet: str, nums: list[int], offers: list[dict[str, Any]],
                     config: dict[str, Any], public_key: str, disk_gb: int | float | None,
                     all_at_once: bool) -> list[dict[str, Any]]:
        """Launch instances numbered ``nums`` from the first offers (cheapest first) and zones
        that have capacity, all in one zone when ``all_at_once``. Returns the raw instances
        launched; raises errors.NoCapacity, naming every attempt, when numbers remain."""
        raise NotImplementedError

    def wait_running(self, placed: list[Any]) -> list[dict[str, Any]]:
        """The raw instances ``placed`` once each runs and has its addresses."""
        raise NotImplementedError

    def reservation(self, reservation_id: str, regions: Iterable[str]) -> dict[str, Any]:
        """What the cloud says of a reservation: ``{"backend", "instance_type", "region",
        "zone", "capacity_block", "state"}``."""
        raise NotImplementedError
