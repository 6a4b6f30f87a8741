# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``gcp`` backend: a backend fleet's nodes are Compute Engine instances, created through
the Compute REST API with google-auth's authorized session.

Request bodies are built by gcp_layout.py; this file makes the calls, awaits the operations and
follows a fleet's resources by their labels (``gpufleet-fleet``) and names (``<fleet>-<num>``,
``gpufleet-<fleet>...``). Credentials are Application Default Credentials (a service-account
key in GOOGLE_APPLICATION_CREDENTIALS, as AWX injects a GCE credential, gcloud's own, or the
metadata server); ``GPUFLEET_GCP_ENDPOINT`` or the ``endpoint`` setting points the calls at
another Compute endpoint (tests use a local double).
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..spec.naming import instance_name
from ..spec.gateway import GATEWAY_TAG
from . import gcp_layout as layout
from .cloud_common import instance_record, launch_in_turn, merged_settings
from .errors import BackendError, CapacityError
from .interface import CloudBackend

try:
    import google.auth
    import google.oauth2.service_account
    from google.auth.exceptions import GoogleAuthError
    from google.auth.transport.requests import AuthorizedSession
    HAS_GOOGLE_AUTH = True
except ImportError:  # pragma: no cover - reported by the module
    HAS_GOOGLE_AUTH = False

ENDPOINT = "https://compute.googleapis.com/compute/v1"
# The images a node boots when the settings name none: Canonical's Ubuntu 24.04 accelerator
# image (NVIDIA driver included) on GPU machine types, plain Ubuntu 24.04 LTS elsewhere.
GPU_IMAGE = ("projects/ubuntu-os-accelerator-images/global/images/family/"
             "ubuntu-accelerator-2404-amd64-with-nvidia-580")
CPU_IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
OPERATION_TIMEOUT = 900

DEFAULT_SETTINGS: dict[str, Any] = {
    "project_id": None,       # default: the credentials' project
    "regions": None,          # default: every region of the catalog
    "vpc_name": "default",    # the main network
    "subnetwork": None,       # region -> subnetwork of the main network (auto-mode: none)
    "extra_vpcs": [],         # networks of the extra gVNIC NICs (A3, A3 Ultra, A4)
    "roce_vpcs": [],          # at most one: the RoCE network of A3 Ultra and A4
    "public_ips": True,
    "image": None,            # an image or image family URL, or region -> URL
    "service_account": None,  # e-mail of the VMs' service account (A3 High needs one)
    "tags": {},
    "endpoint": None,
    "ssh_user": "ubuntu",     # the user the fleet's key is installed for
}


class GcpError(BackendError):
    """A Compute Engine call or a setting that failed; the message says what and what to do."""


def settings_with_defaults(settings):
    merged = merged_settings("gcp", DEFAULT_SETTINGS, settings, GcpError)
    if len(merged["roce_vpcs"] or []) > 1:
        raise GcpError("gcp settings: roce_vpcs takes at most one network, got %d"
                       % len(merged["roce_vpcs"]))
    return merged


def region_of(zone):
    return zone.rsplit("-", 1)[0]


def _last(url):
    return (url or "").rstrip("/").rsplit("/", 1)[-1]


# Where AWX's Google Compute Engine credential puts the service-account key (older AWX sets
# only these two; newer AWX also sets GOOGLE_APPLICATION_CREDENTIALS, which google-auth reads),
# and its project, for job templates and inventory updates alike.
AWX_KEY_FILE_VARS = ("GCP_SERVICE_ACCOUNT_FILE", "GCE_CREDENTIALS_FILE_PATH")
PROJECT_VARS = ("GCP_PROJECT", "GCE_PROJECT", "GOOGLE_CLOUD_PROJECT")


def key_file(environ):
    """The service-account key file AWX injected, when GOOGLE_APPLICATION_CREDENTIALS is not
    set (google-auth finds that one itself); None otherwise."""
    if environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return None
    for name in AWX_KEY_FILE_VARS:
        if environ.get(name):
            return environ[name]
    return None


def env_project(environ):
    """The project named by the environment (AWX's credential, gcloud's variable), or None."""
    for name in PROJECT_VARS:
        if environ.get(name):
            return environ[name]
    return None


def _credentials(environ):
    """(credentials, project or None): an injected key file, else Application Default
    Credentials."""
    path = key_file(environ)
    try:
        if path:
            credentials = google.oauth2.service_account.Credentials.from_service_account_file(
                path, scopes=list(layout.SCOPES))
            return credentials, getattr(credentials, "project_id", None)
        return google.auth.default(scopes=list(layout.SCOPES))
    except (GoogleAuthError, OSError, ValueError) as exc:
        raise GcpError("no Google Cloud credentials: %s. Set GOOGLE_APPLICATION_CREDENTIALS to "
                       "a service-account key file (AWX: a Google Compute Engine credential)"
                       % (("%s: %s" % (path, exc)) if path else exc)) from exc


class Gcp(CloudBackend):
    """Compute Engine for one project (the contract: interface.CloudBackend)."""

    name = "gcp"

    def __init__(self, settings=None, session=None, poll=2):
        if not HAS_GOOGLE_AUTH:
            raise GcpError("the gcp backend needs google-auth and requests on the controller: "
                           "pip install google-auth requests")
        self.settings = settings_with_defaults(settings)
        self.poll = poll
        self.endpoint = (self.settings["endpoint"] or os.environ.get("GPUFLEET_GCP_ENDPOINT")
                         or ENDPOINT).rstrip("/")
        project = self.settings["project_id"] or env_project(os.environ)
        if session is None:
            credentials, found = _credentials(os.environ)
            session = AuthorizedSession(credentials)
            project = project or found
        if not project:
            raise GcpError("no Google Cloud project: set project_id in the gcp backend settings")
        self.project = project
        self.session = session

    # -- HTTP -----------------------------------------------------------------------------

    def _request(self, method, path, what, body=None, params=None, missing_ok=False):
        url = "%s/projects/%s%s" % (self.endpoint, self.project, path)
        try:
            response = self.session.request(method, url, json=body, params=params, timeout=120)
        except Exception as exc:  # pylint: disable=broad-exception-caught
            raise GcpError("%s failed: %s" % (what, exc)) from exc
        if response.status_code == 404 and missing_ok:
            return None
        try:
            payload = response.json() if response.content else {}
        except ValueError:
            payload = {}
        if response.status_code >= 400:
            error = payload.get("error") or {}
            reasons = [e.get("reason") for e in error.get("errors") or []]
            if set(reasons) & layout.CAPACITY_ERRORS:
                raise CapacityError(sorted(set(reasons) & layout.CAPACITY_ERRORS)[0])
            raise GcpError("%s failed: HTTP %d %s" % (what, response.status_code,
                                                      error.get("message") or response.text))
        return payload

    def _wait(self, operation, what):
        """Await an operation; raise on its error (capacity errors as CapacityError)."""
        deadline = time.monotonic() + OPERATION_TIMEOUT
        while operation.get("status") != "DONE":
            if time.monotonic() > deadline:
                raise GcpError("%s did not finish in %d s" % (what, OPERATION_TIMEOUT))
            scope = ("/zones/%s" % _last(operation["zone"]) if operation.get("zone") else
                     "/regions/%s" % _last(operation["region"]) if operation.get("region")
                     else "/global")
            operation = self._request("POST", "%s/operations/%s/wait" % (scope, operation["name"]),
                                      what)
        errors = (operation.get("error") or {}).get("errors") or []
        if errors:
            code = errors[0].get("code") or ""
            if code in layout.CAPACITY_ERRORS:
                raise CapacityError(code)
            raise GcpError("%s failed: %s: %s" % (what, code, errors[0].get("message")))
        return operation

    def _call(self, method, path, what, body=None, params=None):
        try:
            return self._wait(self._request(method, path, what, body, params), what)
        except CapacityError as exc:
            raise GcpError("%s failed: %s" % (what, exc.code)) from exc

    # -- reading ------------------------------------------------------------------------------

    def fleet_instances(self, fleet, regions):
        """``[(zone, instance)]`` of the fleet's instances in ``regions``, by label."""
        wanted = set(regions)
        found = []
        params = {"filter": 'labels.%s = "%s"' % (layout.LABEL_FLEET, layout.label_value(fleet))}
        while True:
            page = self._request("GET", "/aggregated/instances",
                                 "listing the instances of fleet %s" % fleet, params=params)
            for scope, bucket in sorted((page.get("items") or {}).items()):
                zone = _last(scope)
                if region_of(zone) not in wanted:
                    continue
                found.extend((zone, i) for i in bucket.get("instances") or []
                             if layout.instance_num(i, fleet) is not None)
            if not page.get("nextPageToken"):
                return found
            params = dict(params, pageToken=page["nextPageToken"])

    def all_fleet_instances(self, regions):
        """``{fleet: [(zone, instance)]}`` of every gpufleet instance in ``regions``."""
        wanted = set(regions)
        found = {}
        params = {}
        while True:
            page = self._request("GET", "/aggregated/instances", "listing gpufleet instances",
                                 params=params)
            for scope, bucket in sorted((page.get("items") or {}).items()):
                zone = _last(scope)
                if region_of(zone) not in wanted:
                    continue
                for instance in bucket.get("instances") or []:
                    fleet = (instance.get("labels") or {}).get(layout.LABEL_FLEET)
                    if fleet and layout.instance_num(instance, fleet) is not None:
                        found.setdefault(fleet, []).append((zone, instance))
            if not page.get("nextPageToken"):
                return found
            params = {"pageToken": page["nextPageToken"]}

    def _subnetworks(self, region, network):
        page = self._request("GET", "/regions/%s/subnetworks" % region,
                             "listing the subnetworks of %s" % network,
                             params={"filter": 'network = "%s"' % (
                                 "https://www.googleapis.com/compute/v1/projects/%s/global/"
                                 "networks/%s" % (self.project, network))})
        return sorted(s["name"] for s in page.get("items") or [])

    def _networks(self, region, machine_type):
        subnet = self.settings["subnetwork"]
        if isinstance(subnet, dict):
            subnet = subnet.get(region)
        main = {"network": self.settings["vpc_name"], "subnetwork": subnet}
        extras = []
        for network in list(self.settings["extra_vpcs"] or [])[:layout.EXTRA_VPCS.get(
                machine_type, 0)]:
            subnets = self._subnetworks(region, network)
            if not subnets:
                raise GcpError("extra VPC %s has no subnetwork in %s: add one, or leave it out "
                               "of extra_vpcs" % (network, region))
            extras.append({"network": network, "subnetwork": subnets[0]})
        roce = None
        if self.settings["roce_vpcs"] and layout.ROCE_NICS.get(machine_type):
            network = self.settings["roce_vpcs"][0]
            roce = {"network": network, "subnetworks": self._subnetworks(region, network)}
        return main, extras, roce

    def image(self, region, gpu):
        chosen = self.settings["image"]
        if isinstance(chosen, dict):
            chosen = chosen.get(region)
        return chosen or (GPU_IMAGE if gpu else CPU_IMAGE)

    def reservation(self, reservation_id, regions):
        """What Compute Engine says of a specific reservation: ``{"backend", "instance_type",
        "region", "zone"}`` (its own placement applies, so no resource policy is added)."""
        page = self._request("GET", "/aggregated/reservations", "looking up reservation %s"
                             % reservation_id,
                             params={"filter": 'name = "%s"' % reservation_id})
        for scope, bucket in sorted((page.get("items") or {}).items()):
            zone = _last(scope)
            for item in bucket.get("reservations") or []:
                if item.get("name") != reservation_id or region_of(zone) not in regions:
                    continue
                properties = (item.get("specificReservation") or {}).get(
                    "instanceProperties") or {}
                return {"backend": "gcp", "instance_type": _last(properties.get("machineType")),
                        "region": region_of(zone), "zone": zone, "capacity_block": False,
                        "state": item.get("status")}
        raise GcpError("reservation %s was not found in %s: check its name and the regions of "
                       "the gcp backend settings" % (reservation_id, ", ".join(regions)))

    # -- what a fleet creates before its instances ---------------------------------------------

    def ensure_firewall(self, fleet, networks, gateway=False):
        existing = self._request("GET", "/global/firewalls", "listing firewall rules",
                                 params={"filter": 'name = "%s*"' % layout.resource_name(fleet)})
        have = set(f["name"] for f in existing.get("items") or [])
        for rule in layout.firewall_bodies(self.project, fleet, networks, gateway):
            if rule["name"] not in have:
                self._call("POST", "/global/firewalls", "creating the firewall rule %s"
                           % rule["name"], body=rule)

    def ensure_resource_policy(self, region, fleet):
        name = layout.resource_name(fleet)
        found = self._request("GET", "/regions/%s/resourcePolicies" % region,
                              "finding the placement policy",
                              params={"filter": 'name = "%s"' % name})
        if not found.get("items"):
            self._call("POST", "/regions/%s/resourcePolicies" % region,
                       "creating the placement policy %s" % name,
                       body=layout.resource_policy_body(fleet))
        return "projects/%s/regions/%s/resourcePolicies/%s" % (self.project, region, name)

    # -- launching ----------------------------------------------------------------------------

    def launch_group(self, fleet, nums, offers, config, public_key, disk_gb, all_at_once):
        """As Aws.launch_group: one bulkInsert per offer and zone for the missing numbers."""
        return launch_in_turn(
            fleet, nums, offers,
            lambda missing, offer, zone: self._launch(fleet, missing, offer, zone, config,
                                                      public_key, disk_gb, all_at_once),
            lambda item: layout.instance_num(item[1], fleet))

    def _launch(self, fleet, nums, offer, zone, config, public_key, disk_gb, all_at_once):
        region = offer["region"]
        gpu = (offer.get("resources") or {}).get("gpu") or {}
        gpu = gpu if gpu.get("count") else None
        machine_type = offer["instance_type"]
        main, extras, roce = self._networks(region, machine_type)
        try:
            interfaces = layout.network_interfaces(machine_type, self.project, region, main,
                                                   extras, roce, bool(self.settings["public_ips"]))
        except layout.LayoutError as exc:
            raise GcpError(str(exc)) from exc
        self.ensure_firewall(fleet, [main["network"]] + [e["network"] for e in extras],
                             bool(config.get("gateway")))
        policy = None
        if config.get("placement") == "cluster" and not config.get("reservation"):
            policy = self.ensure_resource_policy(region, fleet)
        tags = dict(self.settings["tags"] or {})
        tags.update(config.get("tags") or {})
        names = [instance_name(fleet, n) for n in nums]
        properties = layout.instance_properties({
            "project": self.project, "fleet": fleet, "offer": offer, "gpu": gpu, "zone": zone,
            "image": self.image(region, gpu), "disk_gb": disk_gb, "interfaces": interfaces,
            "public_key": public_key, "ssh_user": self.settings["ssh_user"],
            "placement": config.get("placement") or "any",
            "blocks": config.get("blocks") or 1, "tags": tags, "resource_policy": policy,
            "reservation": config.get("reservation"),
            "service_account": self.settings["service_account"],
            "made_for": config.get("made_for"), "creator": config.get("creator"),
            "gateway": bool(config.get("gateway")),
        })
        body = layout.bulk_insert_body(names, properties, all_at_once)
        operation = self._request(
            "POST", "/zones/%s/instances/bulkInsert" % zone,
            "creating %s in %s" % (machine_type, zone), body=body,
            params={"requestId": layout.request_id(fleet, names, offer, zone)})
        self._wait(operation, "creating %s in %s" % (machine_type, zone))
        page = self._request("GET", "/zones/%s/instances" % zone, "listing new instances",
                             params={"filter": 'labels.%s = "%s"' % (
                                 layout.LABEL_FLEET, layout.label_value(fleet))})
        return [(zone, i) for i in page.get("items") or [] if i["name"] in names]

    def wait_running(self, placed):
        deadline = time.monotonic() + OPERATION_TIMEOUT
        result = []
        for zone, instance in placed:
            while instance.get("status") in ("PROVISIONING", "STAGING"):
                if time.monotonic() > deadline:
                    raise GcpError("instance %s did not start running" % instance["name"])
                time.sleep(self.poll)
                instance = self._request("GET", "/zones/%s/instances/%s" % (
                    zone, instance["name"]), "reading %s" % instance["name"])
            result.append((zone, instance))
        return result

    # -- network volumes (persistent disks) -------------------------------------------------

    def _disks(self, text):
        page = self._request("GET", "/aggregated/disks", "listing disks",
                             params={"filter": text})
        return [(_last(scope), disk) for scope, bucket in sorted((page.get("items") or {}).items())
                for disk in bucket.get("disks") or []]

    def volume(self, name, region):
        """``(zone, disk)`` of the disk labelled as the gpufleet volume ``name``; None."""
        text = 'labels.%s = "%s"' % (layout.LABEL_VOLUME, layout.label_value(name))
        for zone, disk in self._disks(text):
            if region_of(zone) == region:
                return zone, disk
        return None

    def all_volumes(self, regions):
        wanted = set(regions)
        found = []
        params = {"filter": "labels.%s:*" % layout.LABEL_VOLUME}
        while True:
            page = self._request("GET", "/aggregated/disks", "listing gpufleet volumes",
                                 params=params)
            for scope, bucket in sorted((page.get("items") or {}).items()):
                zone = _last(scope)
                for disk in bucket.get("disks") or []:
                    name = (disk.get("labels") or {}).get(layout.LABEL_VOLUME)
                    if name and region_of(zone) in wanted:
                        found.append((name, region_of(zone), (zone, disk)))
            if not page.get("nextPageToken"):
                return found
            params = dict(params, pageToken=page["nextPageToken"])

    def first_zone(self, region):
        found = self._request("GET", "/regions/%s" % region, "reading region %s" % region)
        zones = sorted(_last(z) for z in found.get("zones") or [])
        if not zones:
            raise GcpError("%s has no zone" % region)
        return zones[0]

    def create_volume(self, name, region, zone, size_gb, config_tags=None):
        tags = dict(self.settings["tags"] or {})
        tags.update(config_tags or {})
        self._call("POST", "/zones/%s/disks" % zone, "creating disk %s" % name,
                   body=layout.disk_body(name, zone, size_gb, tags),
                   params={"requestId": layout.request_id(
                       "volume", [name], {"instance_type": "disk", "region": region,
                                          "spot": False}, zone)})
        return zone, self._request("GET", "/zones/%s/disks/%s" % (zone, name),
                                   "reading disk %s" % name)

    def register_volume(self, name, region, volume_id):
        for zone, disk in self._disks('name = "%s"' % volume_id):
            if region_of(zone) != region:
                continue
            labels = dict(disk.get("labels") or {})
            labels.update({layout.LABEL_VOLUME: layout.label_value(name),
                           layout.LABEL_EXTERNAL: "true"})
            self._call("POST", "/zones/%s/disks/%s/setLabels" % (zone, volume_id),
                       "labelling disk %s" % volume_id,
                       body={"labels": labels, "labelFingerprint": disk.get("labelFingerprint")})
            return zone, self._request("GET", "/zones/%s/disks/%s" % (zone, volume_id),
                                       "reading disk %s" % volume_id)
        raise GcpError("disk %s was not found in %s" % (volume_id, region))

    def delete_volume(self, name, region, volume):
        zone, disk = volume
        if disk.get("users"):
            raise GcpError("volume %s (disk %s) is attached to %s: stop the runs that use it "
                           "first" % (name, disk["name"], ", ".join(
                               _last(u) for u in disk["users"])))
        labels = disk.get("labels") or {}
        if labels.get(layout.LABEL_EXTERNAL) == "true":
            kept = dict((k, v) for k, v in labels.items()
                        if k not in (layout.LABEL_VOLUME, layout.LABEL_EXTERNAL))
            self._call("POST", "/zones/%s/disks/%s/setLabels" % (zone, disk["name"]),
                       "unlabelling disk %s" % disk["name"],
                       body={"labels": kept, "labelFingerprint": disk.get("labelFingerprint")})
            return
        self._call("DELETE", "/zones/%s/disks/%s" % (zone, disk["name"]),
                   "deleting disk %s" % disk["name"])

    def host_instance(self, record):
        """``(zone, instance)`` of an instance record (fleets.records)."""
        zone = record["zone"]
        return zone, self._request("GET", "/zones/%s/instances/%s" % (zone, record["name"]),
                                   "reading %s" % record["name"])

    def attach_volume(self, name, region, volume, instance):
        """Attach the disk to the instance (``(zone, instance)``) unless it is already;
        returns the device paths the host may see it under."""
        zone, disk = volume
        host_zone, host = instance
        device = "gpufleet-" + name
        paths = ["/dev/disk/by-id/google-" + device]
        users = [_last(u) for u in disk.get("users") or []]
        if host["name"] in users:
            return paths
        if users:
            raise GcpError("volume %s (disk %s) is attached to %s: stop the runs that use it "
                           "there first" % (name, disk["name"], ", ".join(users)))
        if zone != host_zone:
            raise GcpError("volume %s is in %s and the host %s in %s: a disk can only be "
                           "attached in its own zone" % (name, zone, host["name"], host_zone))
        self._call("POST", "/zones/%s/instances/%s/attachDisk" % (zone, host["name"]),
                   "attaching volume %s" % name, body={
                       "source": "projects/%s/zones/%s/disks/%s" % (self.project, zone,
                                                                    disk["name"]),
                       "deviceName": device, "mode": "READ_WRITE", "autoDelete": False})
        return paths

    def detach_volume(self, name, region, volume):
        zone, disk = volume
        users = [_last(u) for u in disk.get("users") or []]
        for user in users:
            self._call("POST", "/zones/%s/instances/%s/detachDisk" % (zone, user),
                       "detaching volume %s" % name, params={"deviceName": "gpufleet-" + name})
        return bool(users)

    # -- the backend-neutral view fleets/cloud.py works with -----------------------------------

    def view(self, placed):
        zone, instance = placed
        fleet = (instance.get("labels") or {}).get(layout.LABEL_FLEET) or ""
        status = instance.get("status")
        return {
            "num": layout.instance_num(instance, fleet),
            "state": "stopped" if layout.STATUSES.get(status) == "stopped" else "running",
            "starting": status in ("PROVISIONING", "STAGING"),
            "placement": (instance.get("labels") or {}).get(layout.LABEL_PLACEMENT) or "any",
            "gateway": (instance.get("labels") or {}).get(GATEWAY_TAG) == "true",
            "region": region_of(zone),
            "zone": zone,
            "instance_type": _last(instance.get("machineType")),
        }

    def records(self, placed, fleet, key_file):
        return instance_records(placed, fleet, key_file, self.settings["public_ips"],
                                self.settings["ssh_user"])

    # -- published members (fleets/access.py) -------------------------------------------------

    member_mark = staticmethod(layout.member_mark)

    def fleet_members(self, fleet, placed):
        """``{user: mark}`` the fleet's instances' labels publish (their union)."""
        found = {}
        for _zone, instance in placed:
            found.update(layout.members_of(instance.get("labels") or {}))
        return found

    def set_member(self, fleet, placed, user, mark):
        """Set ``user``'s member label on every instance in ``placed`` (``mark``), or remove
        it (None): setLabels with the instance's current labels and their fingerprint."""
        key = layout.LABEL_MEMBER + user
        changed = False
        for zone, instance in placed:
            if (instance.get("labels") or {}).get(key) == mark:
                continue
            path = "/zones/%s/instances/%s" % (zone, instance["name"])
            fresh = self._request("GET", path, "reading instance %s" % instance["name"])
            labels = dict(fresh.get("labels") or {})
            if labels.get(key) == mark:
                continue
            if mark:
                labels[key] = mark
            else:
                labels.pop(key, None)
            self._call("POST", path + "/setLabels", "labelling instance %s" % instance["name"],
                       body={"labels": labels,
                             "labelFingerprint": fresh.get("labelFingerprint")})
            changed = True
        return changed

    # -- starting, stopping, removing ---------------------------------------------------------

    def start(self, placed):
        for zone, instance in placed:
            self._call("POST", "/zones/%s/instances/%s/start" % (zone, instance["name"]),
                       "starting %s" % instance["name"])

    def terminate(self, placed, wait=True):
        for zone, instance in placed:
            operation = self._request("DELETE", "/zones/%s/instances/%s" % (
                zone, instance["name"]), "deleting %s" % instance["name"], missing_ok=True)
            if operation is not None and wait:
                self._wait(operation, "deleting %s" % instance["name"])

    def delete_fleet(self, fleet, regions, check_mode=False):
        """Delete the fleet's instances, then its placement policies and firewall rules."""
        removed = {"instances": [], "resource_policies": [], "firewalls": []}
        placed = self.fleet_instances(fleet, regions)
        removed["instances"] = [i["name"] for _z, i in placed]
        policies = []
        for region in regions:
            found = self._request("GET", "/regions/%s/resourcePolicies" % region,
                                  "finding placement policies",
                                  params={"filter": 'name = "%s"' % layout.resource_name(fleet)})
            policies.extend((region, p["name"]) for p in found.get("items") or [])
        removed["resource_policies"] = [name for _r, name in policies]
        rules = self._request("GET", "/global/firewalls", "listing firewall rules",
                              params={"filter": 'name = "%s*"' % layout.resource_name(fleet)})
        removed["firewalls"] = sorted(f["name"] for f in rules.get("items") or []
                                      if f["name"] == layout.resource_name(fleet)
                                      or f["name"].startswith(layout.resource_name(fleet) + "-"))
        if check_mode:
            return removed
        self.terminate(placed)
        for region, name in policies:
            self._call("DELETE", "/regions/%s/resourcePolicies/%s" % (region, name),
                       "deleting the placement policy %s" % name)
        for name in removed["firewalls"]:
            self._call("DELETE", "/global/firewalls/%s" % name,
                       "deleting the firewall rule %s" % name)
        return removed


VOLUME_STATUSES = {"CREATING": "submitted", "RESTORING": "submitted", "READY": "active",
                   "FAILED": "failed", "DELETING": "terminating"}


def volume_record(name, zone, disk):
    """A volume record (docs/volumes.md) from a described persistent disk."""
    labels = disk.get("labels") or {}
    return {
        "name": name, "backend": "gcp", "region": region_of(zone), "availability_zone": zone,
        "size": int(disk.get("sizeGb") or 0) or None, "volume_id": disk["name"],
        "status": VOLUME_STATUSES.get(disk.get("status"), "active"),
        "external": labels.get(layout.LABEL_EXTERNAL) == "true",
        "attached_to": [_last(u) for u in disk.get("users") or []],
        "created": disk.get("creationTimestamp"),
    }


def instance_records(placed, fleet, key_file, public_ips=True, user=layout.SSH_USER):
    """Instance records (fleets.records) of the fleet's instances."""
    records = []
    for zone, instance in placed:
        num = layout.instance_num(instance, fleet)
        if num is None:
            continue
        metadata = dict((i["key"], i.get("value")) for i in
                        (instance.get("metadata") or {}).get("items") or [])
        nic = (instance.get("networkInterfaces") or [{}])[0]
        spot = (instance.get("scheduling") or {}).get("provisioningModel") == "SPOT"
        stopped = instance.get("status") in ("STOPPING", "TERMINATED")
        records.append(instance_record(fleet, num, "gcp", {
            # A spot VM stops when Compute Engine preempts it; nothing else says so on it.
            "error": ("preempted by Compute Engine (spot VM stopped at %s)"
                      % instance.get("lastStopTimestamp", "an unknown time")) if (
                spot and stopped) else None,
            "region": region_of(zone), "zone": zone,
            "instance_type": _last(instance.get("machineType")),
            "instance_id": instance.get("id"),
            "spot": (instance.get("scheduling") or {}).get("provisioningModel") == "SPOT",
            "status": layout.STATUSES.get(instance.get("status"), "provisioning"),
            "created": instance.get("creationTimestamp"),
            "public": next((a.get("natIP") for a in nic.get("accessConfigs") or []
                            if a.get("natIP")), None),
            "private": nic.get("networkIP"),
            "price": metadata.get(layout.META_PRICE), "blocks": metadata.get(layout.META_BLOCKS),
            "placement": (instance.get("labels") or {}).get(layout.LABEL_PLACEMENT),
            "made_for_run": metadata.get(layout.META_MADE_FOR),
            "idle_duration": metadata.get(layout.META_IDLE),
            "creator": (instance.get("labels") or {}).get(layout.LABEL_CREATOR),
            "members": layout.members_of(instance.get("labels") or {}),
        }, key_file, user, public_ips))
    records.sort(key=lambda r: r["num"])
    return records
