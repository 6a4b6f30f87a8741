"""A local Compute Engine API for tests: an HTTP server speaking the REST shapes the gcp
backend uses, with state in memory.

It answers instances (bulkInsert, get, list, aggregatedList, delete, start), reservations,
machine types and accelerator types (aggregatedList, from ``reservations``,
``machine_types`` and ``accelerator_types``), the Cloud Billing Catalog's SKUs (``skus``),
zone and region
operations (get, wait: every operation is done at once), resource policies, firewalls,
networks and subnetworks, and an OAuth token endpoint, so google-auth's service-account
credentials work against it unchanged (``credentials_file`` writes such a file). Every request
is recorded as ``{"method", "path", "query", "body"}`` for tests to assert on. Like the real API
it keeps bulkInsert idempotent by ``requestId``, refuses a name that exists, and gives a zone
only the capacity set in ``capacity[zone]`` (operation error ZONE_RESOURCE_POOL_EXHAUSTED).
"""

from __future__ import annotations

import datetime
import itertools
import json
import re
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

PREFIX = "/compute/v1"


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class GceDouble:
    def __init__(self, project="test-project"):
        self.project = project
        self.requests = []
        self.tokens = 0  # access tokens handed out (the OAuth token endpoint)
        self.instances = {}          # (zone, name) -> instance
        self.policies = {}           # (region, name) -> policy
        self.firewalls = {}          # name -> firewall
        self.networks = {"default": {"name": "default", "autoCreateSubnetworks": True}}
        self.subnetworks = {}        # (region, name) -> subnetwork
        self.operations = {}         # name -> operation
        self.requests_seen = {}      # requestId -> operation name
        self.capacity = {}           # zone -> instances one bulkInsert may get
        self.reservations = {}       # (zone, name) -> machine type
        self.disks = {}              # (zone, name) -> disk
        self.machine_types = {}      # zone -> [machineType resources]
        self.accelerator_types = {}  # zone -> [acceleratorType resources]
        self.skus = []               # Cloud Billing Catalog SKUs of Compute Engine
        self.failures = []
        self.lock = threading.Lock()
        self.addresses = itertools.count(2)
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                double._handle(self, "GET")

            def do_POST(self):
                double._handle(self, "POST")

            def do_DELETE(self):
                double._handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.endpoint = self.url + PREFIX
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    # -- what tests use ---------------------------------------------------------------------

    def credentials_file(self, path):
        """A service-account key file whose token URI is this double."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        with open(path, "w") as handle:
            json.dump({"type": "service_account", "project_id": self.project,
                       "private_key_id": "test", "private_key": pem,
                       "client_email": "gpufleet@%s.iam.gserviceaccount.com" % self.project,
                       "client_id": "1", "token_uri": self.url + "/token"}, handle)
        return path

    def calls(self, method=None, pattern=None):
        with self.lock:
            return [r for r in self.requests if (method is None or r["method"] == method)
                    and (pattern is None or re.search(pattern, r["path"]))]

    def mutating(self):
        return [r for r in self.calls() if r["method"] in ("POST", "DELETE")
                and not r["path"].endswith(("/wait", "/token"))]

    def add_subnetwork(self, region, name, network):
        self.subnetworks[(region, name)] = {
            "name": name, "region": region, "ipCidrRange": "10.%d.0.0/20" % len(self.subnetworks),
            "network": "projects/%s/global/networks/%s" % (self.project, network),
            "selfLink": "projects/%s/regions/%s/subnetworks/%s" % (self.project, region, name)}
        self.networks.setdefault(network, {"name": network, "autoCreateSubnetworks": False})

    def fail(self, method, pattern, code, message="injected by the test", when=None):
        self.failures.append({"method": method, "pattern": pattern, "code": code,
                              "message": message, "when": when})

    def clear(self):
        with self.lock:
            self.requests.clear()
        self.failures.clear()
        self.capacity.clear()
        self.reservations.clear()
        self.disks.clear()
        self.machine_types.clear()
        self.accelerator_types.clear()
        self.skus.clear()

    def preempt(self, zone, name):
        """Compute Engine preempts a spot VM: it stops (TERMINATED), as a spot VM whose
        instanceTerminationAction is STOP does."""
        with self.lock:
            instance = self.instances[(zone, name)]
            instance["status"] = "TERMINATED"
            instance["lastStopTimestamp"] = _now()

    def stop(self):
        self.server.shutdown()

    # -- plumbing -----------------------------------------------------------------------------

    def _handle(self, handler, method):
        parsed = urllib.parse.urlsplit(handler.path)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        if parsed.path == "/token":
            with self.lock:
                self.tokens += 1
            return self._send(handler, 200, {"access_token": "test-token", "expires_in": 3600,
                                             "token_type": "Bearer"})
        body = json.loads(raw) if raw else None
        path = parsed.path[len(PREFIX):] if parsed.path.startswith(PREFIX) else parsed.path
        with self.lock:
            self.requests.append({"method": method, "path": path, "query": query, "body": body})
        for failure in self.failures:
            if failure["method"] == method and re.search(failure["pattern"], path) and (
                    failure["when"] is None or failure["when"](body or {})):
                return self._error(handler, 400, failure["code"], failure["message"])
        for route_method, route, action in self._routes():
            match = re.fullmatch(route, path)
            if match and route_method == method:
                return action(handler, query, body, **match.groupdict())
        return self._error(handler, 404, "notFound", "no such API path: %s %s" % (method, path))

    def _routes(self):
        p = "/projects/(?P<project>[^/]+)"
        z = p + "/zones/(?P<zone>[^/]+)"
        r = p + "/regions/(?P<region>[^/]+)"
        return [
            ("POST", z + "/instances/bulkInsert", self._bulk_insert),
            ("GET", z + "/instances", self._list_instances),
            ("GET", p + "/aggregated/instances", self._aggregated_instances),
            ("GET", p + "/aggregated/reservations", self._aggregated_reservations),
            ("GET", p + "/aggregated/disks", self._aggregated_disks),
            ("POST", z + "/disks", self._insert_disk),
            ("GET", z + "/disks/(?P<name>[^/]+)", self._get_disk),
            ("POST", z + "/disks/(?P<name>[^/]+)/setLabels", self._set_disk_labels),
            ("DELETE", z + "/disks/(?P<name>[^/]+)", self._delete_disk),
            ("GET", r, self._get_region),
            ("GET", p + "/aggregated/machineTypes", self._aggregated("machineTypes")),
            ("GET", p + "/aggregated/acceleratorTypes", self._aggregated("acceleratorTypes")),
            ("GET", r"/v1/services/(?P<service>[^/]+)/skus", self._skus),
            ("GET", z + "/instances/(?P<name>[^/]+)", self._get_instance),
            ("DELETE", z + "/instances/(?P<name>[^/]+)", self._delete_instance),
            ("POST", z + "/instances/(?P<name>[^/]+)/start", self._start_instance),
            ("POST", z + "/instances/(?P<name>[^/]+)/setLabels", self._set_instance_labels),
            ("POST", z + "/instances/(?P<name>[^/]+)/attachDisk", self._attach_disk),
            ("POST", z + "/instances/(?P<name>[^/]+)/detachDisk", self._detach_disk),
            ("POST", z + "/operations/(?P<op>[^/]+)/wait", self._get_operation),
            ("GET", z + "/operations/(?P<op>[^/]+)", self._get_operation),
            ("POST", r + "/operations/(?P<op>[^/]+)/wait", self._get_operation),
            ("GET", r + "/operations/(?P<op>[^/]+)", self._get_operation),
            ("POST", p + "/global/operations/(?P<op>[^/]+)/wait", self._get_operation),
            ("POST", r + "/resourcePolicies", self._insert_policy),
            ("GET", r + "/resourcePolicies", self._list_policies),
            ("DELETE", r + "/resourcePolicies/(?P<name>[^/]+)", self._delete_policy),
            ("POST", p + "/global/firewalls", self._insert_firewall),
            ("GET", p + "/global/firewalls", self._list_firewalls),
            ("DELETE", p + "/global/firewalls/(?P<name>[^/]+)", self._delete_firewall),
            ("GET", p + "/global/networks/(?P<name>[^/]+)", self._get_network),
            ("GET", r + "/subnetworks", self._list_subnetworks),
        ]

    @staticmethod
    def _send(handler, status, payload):
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _error(self, handler, status, reason, message):
        self._send(handler, status, {"error": {"code": status, "message": message,
                                               "errors": [{"reason": reason,
                                                           "message": message}]}})

    def _operation(self, handler, scope, target, error=None, request_id=None):
        if request_id and request_id in self.requests_seen:
            return self._send(handler, 200, self.operations[self.requests_seen[request_id]])
        name = "operation-" + uuid.uuid4().hex[:16]
        operation = {"kind": "compute#operation", "name": name, "status": "DONE",
                     "targetLink": target, "insertTime": _now()}
        operation.update(scope)
        if error:
            operation["error"] = {"errors": [{"code": error[0], "message": error[1]}]}
        self.operations[name] = operation
        if request_id:
            self.requests_seen[request_id] = name
        return self._send(handler, 200, operation)

    def _get_operation(self, handler, query, body, op, **_scope):
        if op not in self.operations:
            return self._error(handler, 404, "notFound", "operation %s" % op)
        return self._send(handler, 200, self.operations[op])

    # -- instances ----------------------------------------------------------------------------

    @staticmethod
    def _matches(instance, text):
        """The filters the backend writes: ``labels.KEY = "VALUE"`` joined with AND."""
        for key, value in re.findall(r'labels\.([a-z0-9_-]+)\s*=\s*"?([^"\s)]*)"?', text or ""):
            if (instance.get("labels") or {}).get(key) != value:
                return False
        return True

    def _bulk_insert(self, handler, query, body, project, zone):
        request_id = query.get("requestId")
        if request_id and request_id in self.requests_seen:
            return self._send(handler, 200, self.operations[self.requests_seen[request_id]])
        names = sorted((body.get("perInstanceProperties") or {}).keys())
        properties = body["instanceProperties"]
        scope = {"zone": "projects/%s/zones/%s" % (project, zone)}
        existing = [n for n in names if (zone, n) in self.instances]
        if existing:
            return self._operation(handler, scope, "", ("RESOURCE_ALREADY_EXISTS",
                                                        "The resource %s already exists"
                                                        % existing[0]), request_id)
        count = min(len(names), self.capacity.get(zone, len(names)))
        if count < int(body.get("minCount") or len(names)):
            return self._operation(handler, scope, "", (
                "ZONE_RESOURCE_POOL_EXHAUSTED",
                "The zone '%s' does not have enough resources available to fulfill the "
                "request." % zone), request_id)
        for name in names[:count]:
            number = next(self.addresses)
            interfaces = []
            for index, nic in enumerate(properties.get("networkInterfaces") or []):
                made = dict(nic, name="nic%d" % index,
                            networkIP="10.%d.%d.%d" % (index, number // 250, number % 250))
                if nic.get("accessConfigs"):
                    made["accessConfigs"] = [dict(nic["accessConfigs"][0],
                                                  natIP="34.1.%d.%d" % (number // 250,
                                                                        number % 250))]
                interfaces.append(made)
            self.instances[(zone, name)] = dict(
                properties, name=name, id=str(uuid.uuid4().int)[:19], status="RUNNING",
                zone="https://www.googleapis.com/compute/v1/projects/%s/zones/%s"
                     % (project, zone),
                machineType="https://www.googleapis.com/compute/v1/projects/%s/zones/%s/"
                            "machineTypes/%s" % (project, zone, properties["machineType"]),
                networkInterfaces=interfaces, creationTimestamp=_now(),
                labelFingerprint=uuid.uuid4().hex[:8])
        return self._operation(handler, scope, "", None, request_id)

    def _list_instances(self, handler, query, body, project, zone):
        items = [i for (z, _n), i in sorted(self.instances.items())
                 if z == zone and self._matches(i, query.get("filter"))]
        return self._send(handler, 200, {"items": items})

    def _aggregated_instances(self, handler, query, body, project):
        grouped = {}
        for (zone, _name), instance in sorted(self.instances.items()):
            if self._matches(instance, query.get("filter")):
                grouped.setdefault("zones/" + zone, {"instances": []})["instances"].append(
                    instance)
        return self._send(handler, 200, {"items": grouped})

    def _attach_disk(self, handler, query, body, project, zone, name):
        if (zone, name) not in self.instances:
            return self._error(handler, 404, "notFound", "instance %s" % name)
        disk = self.disks.get((zone, body["source"].rsplit("/", 1)[-1]))
        if disk is None:
            return self._error(handler, 404, "notFound", "disk %s" % body["source"])
        if disk["users"]:
            return self._error(handler, 400, "resourceInUseByAnotherResource",
                               "disk %s is in use" % disk["name"])
        disk["users"] = ["projects/%s/zones/%s/instances/%s" % (project, zone, name)]
        self.instances[(zone, name)].setdefault("disks", []).append(
            {"source": body["source"], "deviceName": body.get("deviceName")})
        return self._operation(handler, {"zone": "projects/%s/zones/%s" % (project, zone)}, name)

    def _detach_disk(self, handler, query, body, project, zone, name):
        instance = self.instances.get((zone, name))
        if instance is None:
            return self._error(handler, 404, "notFound", "instance %s" % name)
        kept = [d for d in instance.get("disks") or []
                if d.get("deviceName") != query.get("deviceName")]
        for gone in [d for d in instance.get("disks") or [] if d not in kept]:
            disk = self.disks.get((zone, gone["source"].rsplit("/", 1)[-1]))
            if disk is not None:
                disk["users"] = []
        instance["disks"] = kept
        return self._operation(handler, {"zone": "projects/%s/zones/%s" % (project, zone)}, name)

    def _aggregated_disks(self, handler, query, body, project):
        text = query.get("filter") or ""
        by_name = re.search(r'^name\s*=\s*"?([^"\s]+)"?', text)
        grouped = {}
        for (zone, name), disk in sorted(self.disks.items()):
            if by_name and name != by_name.group(1):
                continue
            if not by_name and not self._matches(disk, text):
                continue
            grouped.setdefault("zones/" + zone, {"disks": []})["disks"].append(disk)
        return self._send(handler, 200, {"items": grouped})

    def _insert_disk(self, handler, query, body, project, zone):
        request_id = query.get("requestId")
        if request_id and request_id in self.requests_seen:
            return self._send(handler, 200, self.operations[self.requests_seen[request_id]])
        if (zone, body["name"]) in self.disks:
            return self._error(handler, 409, "alreadyExists", "disk %s" % body["name"])
        self.disks[(zone, body["name"])] = dict(
            body, status="READY", zone=zone, users=[], creationTimestamp=_now(),
            labelFingerprint=uuid.uuid4().hex[:8])
        return self._operation(handler, {"zone": "projects/%s/zones/%s" % (project, zone)},
                               body["name"], None, request_id)

    def _get_disk(self, handler, query, body, project, zone, name):
        if (zone, name) not in self.disks:
            return self._error(handler, 404, "notFound", "disk %s" % name)
        return self._send(handler, 200, self.disks[(zone, name)])

    def _set_disk_labels(self, handler, query, body, project, zone, name):
        disk = self.disks.get((zone, name))
        if disk is None:
            return self._error(handler, 404, "notFound", "disk %s" % name)
        if body.get("labelFingerprint") != disk["labelFingerprint"]:
            return self._error(handler, 412, "conditionNotMet", "labelFingerprint mismatch")
        disk.update(labels=body.get("labels") or {}, labelFingerprint=uuid.uuid4().hex[:8])
        return self._operation(handler, {"zone": "projects/%s/zones/%s" % (project, zone)}, name)

    def _delete_disk(self, handler, query, body, project, zone, name):
        disk = self.disks.get((zone, name))
        if disk is None:
            return self._error(handler, 404, "notFound", "disk %s" % name)
        if disk.get("users"):
            return self._error(handler, 400, "resourceInUseByAnotherResource",
                               "disk %s is in use" % name)
        del self.disks[(zone, name)]
        return self._operation(handler, {"zone": "projects/%s/zones/%s" % (project, zone)}, name)

    def _get_region(self, handler, query, body, project, region):
        return self._send(handler, 200, {"name": region, "zones": [
            "https://www.googleapis.com/compute/v1/projects/%s/zones/%s-%s"
            % (project, region, letter) for letter in "abc"]})

    def _aggregated(self, kind):
        store = self.machine_types if kind == "machineTypes" else self.accelerator_types

        def answer(handler, query, body, project):
            items = dict(("zones/" + zone, {kind: list(entries)})
                         for zone, entries in sorted(store.items()))
            return self._send(handler, 200, {"items": items})
        return answer

    def _skus(self, handler, query, body, service):
        # Two pages, to exercise paging.
        half = len(self.skus) // 2
        if query.get("pageToken") == "2":
            return self._send(handler, 200, {"skus": self.skus[half:]})
        return self._send(handler, 200, {"skus": self.skus[:half], "nextPageToken": "2"})

    def _aggregated_reservations(self, handler, query, body, project):
        wanted = re.search(r'name\s*=\s*"?([^"\s]+)"?', query.get("filter") or "")
        grouped = {}
        for (zone, name), machine_type in sorted(self.reservations.items()):
            if wanted and name != wanted.group(1):
                continue
            grouped.setdefault("zones/" + zone, {"reservations": []})["reservations"].append({
                "name": name, "zone": zone, "status": "READY",
                "specificReservation": {"count": "2",
                                        "instanceProperties": {"machineType": machine_type}}})
        return self._send(handler, 200, {"items": grouped})

    def _get_instance(self, handler, query, body, project, zone, name):
        if (zone, name) not in self.instances:
            return self._error(handler, 404, "notFound", "instance %s" % name)
        return self._send(handler, 200, self.instances[(zone, name)])

    def _delete_instance(self, handler, query, body, project, zone, name):
        if (zone, name) not in self.instances:
            return self._error(handler, 404, "notFound", "instance %s" % name)
        del self.instances[(zone, name)]
        return self._operation(handler, {"zone": "projects/%s/zones/%s" % (project, zone)}, name)

    def _set_instance_labels(self, handler, query, body, project, zone, name):
        instance = self.instances.get((zone, name))
        if instance is None:
            return self._error(handler, 404, "notFound", "instance %s" % name)
        if body.get("labelFingerprint") != instance.get("labelFingerprint"):
            return self._error(handler, 412, "conditionNotMet", "labelFingerprint mismatch")
        instance.update(labels=body.get("labels") or {}, labelFingerprint=uuid.uuid4().hex[:8])
        return self._operation(handler, {"zone": "projects/%s/zones/%s" % (project, zone)}, name)

    def _start_instance(self, handler, query, body, project, zone, name):
        if (zone, name) not in self.instances:
            return self._error(handler, 404, "notFound", "instance %s" % name)
        self.instances[(zone, name)]["status"] = "RUNNING"
        return self._operation(handler, {"zone": "projects/%s/zones/%s" % (project, zone)}, name)

    # -- resource policies, firewalls, networks -----------------------------------------------

    def _insert_policy(self, handler, query, body, project, region):
        if (region, body["name"]) in self.policies:
            return self._error(handler, 409, "alreadyExists", "policy %s" % body["name"])
        self.policies[(region, body["name"])] = dict(
            body, selfLink="projects/%s/regions/%s/resourcePolicies/%s"
            % (project, region, body["name"]), region=region)
        return self._operation(handler, {"region": "projects/%s/regions/%s" % (project, region)},
                               body["name"])

    def _list_policies(self, handler, query, body, project, region):
        wanted = re.search(r'name\s*=\s*"?([^"\s]+)"?', query.get("filter") or "")
        items = [p for (r, n), p in sorted(self.policies.items())
                 if r == region and (not wanted or n == wanted.group(1))]
        return self._send(handler, 200, {"items": items})

    def _delete_policy(self, handler, query, body, project, region, name):
        if (region, name) not in self.policies:
            return self._error(handler, 404, "notFound", "policy %s" % name)
        in_use = [n for (_z, n), i in self.instances.items()
                  if any(p.endswith("/" + name) for p in i.get("resourcePolicies") or [])]
        if in_use:
            return self._error(handler, 400, "resourceInUseByAnotherResource",
                               "policy %s is used by %s" % (name, in_use[0]))
        del self.policies[(region, name)]
        return self._operation(handler, {"region": "projects/%s/regions/%s" % (project, region)},
                               name)

    def _insert_firewall(self, handler, query, body, project):
        if body["name"] in self.firewalls:
            return self._error(handler, 409, "alreadyExists", "firewall %s" % body["name"])
        self.firewalls[body["name"]] = body
        return self._operation(handler, {}, body["name"])

    def _list_firewalls(self, handler, query, body, project):
        prefix = re.search(r'name\s*=\s*"?([^"\s*]+)\*?"?', query.get("filter") or "")
        items = [f for n, f in sorted(self.firewalls.items())
                 if not prefix or n.startswith(prefix.group(1))]
        return self._send(handler, 200, {"items": items})

    def _delete_firewall(self, handler, query, body, project, name):
        if name not in self.firewalls:
            return self._error(handler, 404, "notFound", "firewall %s" % name)
        del self.firewalls[name]
        return self._operation(handler, {}, name)

    def _get_network(self, handler, query, body, project, name):
        if name not in self.networks:
            return self._error(handler, 404, "notFound", "network %s" % name)
        return self._send(handler, 200, dict(
            self.networks[name], selfLink="projects/%s/global/networks/%s" % (project, name)))

    def _list_subnetworks(self, handler, query, body, project, region):
        wanted = re.search(r'network\s*=\s*"?([^"\s]+)"?', query.get("filter") or "")
        items = [s for (r, _n), s in sorted(self.subnetworks.items())
                 if r == region and (not wanted or s["network"].endswith(
                     "/" + wanted.group(1).rsplit("/", 1)[-1]))]
        return self._send(handler, 200, {"items": items})
