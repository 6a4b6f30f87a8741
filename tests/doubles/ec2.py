"""A local EC2 endpoint for tests: moto's server behind a recording proxy.

moto (``ThreadedMotoServer``) answers the EC2 API for real: instances, security groups, key
pairs, addresses, tags. This proxy sits in front of it and

- records every request as ``{"action": ..., "params": {...}}`` (the EC2 query parameters, as
  flat as the wire has them), so tests assert the exact parameters of each mutating call;
- answers what moto lacks: placement groups (Create/Describe/DeletePlacementGroups), capacity
  reservations and blocks (DescribeCapacityReservations, from ``reservations``), and
  refuses a launch into a placement group that does not exist, as EC2 does;
- keeps RunInstances idempotent by ClientToken, as EC2 does and moto does not: the same token
  with the same parameters answers the first launch again, other parameters are refused with
  IdempotentParameterMismatch;
- launches as EC2 does, as many instances as there is capacity for up to MaxCount (moto
  launches MinCount): ``capacity[zone] = n`` caps what one launch in that zone gets, and below
  MinCount the launch fails with InsufficientInstanceCapacity;
- can back each launched instance with a real host (``backing(instance_id, public_key)``
  returns its address, ``unbacking(instance_id)`` on termination): every answer then shows
  that address instead of moto's, so a play reaches the "instance" over SSH;
- fails chosen calls on demand (``fail(action, code, when=...)``), e.g. a RunInstances in one
  zone with InsufficientInstanceCapacity, as EC2 answers it (HTTP 500).

Point boto3 at ``double.url`` (``AWS_ENDPOINT_URL``) with any credentials.
"""

from __future__ import annotations

import base64
import http.client
import re
import socket
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

from moto.server import ThreadedMotoServer

EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _indexed(params, prefix):
    """The values of ``Prefix.1``, ``Prefix.2``... in order."""
    found = []
    number = 1
    while "%s.%d" % (prefix, number) in params:
        found.append(params["%s.%d" % (prefix, number)])
        number += 1
    return found


def _tags_of(params, resource_type):
    """Tags of a TagSpecification.N for ``resource_type`` in flat query params."""
    number = 1
    while "TagSpecification.%d.ResourceType" % number in params:
        if params["TagSpecification.%d.ResourceType" % number] == resource_type:
            prefix = "TagSpecification.%d.Tag" % number
            tags = {}
            index = 1
            while "%s.%d.Key" % (prefix, index) in params:
                tags[params["%s.%d.Key" % (prefix, index)]] = \
                    params.get("%s.%d.Value" % (prefix, index), "")
                index += 1
            return tags
        number += 1
    return {}


class Ec2Double:
    def __init__(self):
        self.moto_port = _free_port()
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=self.moto_port, verbose=False)
        self.moto.start()
        self.requests = []
        self.placement_groups = {}
        self.launches = {}      # ClientToken -> (params, response body)
        self.capacity = {}      # zone -> how many instances one launch there can get
        self.reservations = {}  # (region, id) -> {instance_type, zone, type, state}
        self.backing = None     # (instance id, public key) -> the address of a real host
        self.unbacking = None   # (instance id) -> None, when the instance is terminated
        self.keys = {}          # (region, key name) -> public key (from ImportKeyPair)
        self.addresses = {}     # moto's address -> the backing host's
        self.failures = []
        self.lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                double._handle(self)

            def do_GET(self):
                double._forward(self, b"")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    # -- what tests use ---------------------------------------------------------------------

    def env(self):
        return dict(ENV, AWS_ENDPOINT_URL=self.url)

    def calls(self, action=None):
        with self.lock:
            return [r for r in self.requests if action is None or r["action"] == action]

    def mutating(self):
        return [r for r in self.calls()
                if not r["action"].startswith(("Describe", "Get"))]

    def fail(self, action, code, message="injected by the test", when=None, times=None):
        """Answer ``action`` with an EC2 error while ``when(params)`` holds (default: always),
        at most ``times`` times."""
        self.failures.append({"action": action, "code": code, "message": message,
                              "when": when, "left": times})

    def reclaim_spot(self, instance_id, region="us-east-1", action="terminate"):
        """EC2 takes a spot instance back: terminated (or stopped, for a spot instance whose
        interruption behavior is stop), with the state reason EC2 gives (moto's own terminate
        and stop say the user did it)."""
        from moto.ec2.models import ec2_backends
        from moto.ec2.models.instances import StateReason

        backend = next(iter(ec2_backends.values()))[region]
        if action == "stop":
            backend.stop_instances([instance_id])
        else:
            backend.terminate_instances([instance_id])
        backend.get_instance(instance_id).state_reason = StateReason(
            "Server.SpotInstanceTermination: Spot instance termination",
            "Server.SpotInstanceTermination")
        if self.unbacking is not None:
            self.unbacking(instance_id)

    def clear(self):
        with self.lock:
            self.requests.clear()
        self.failures.clear()
        self.capacity.clear()
        self.reservations.clear()

    def stop(self):
        self.server.shutdown()
        self.moto.stop()

    # -- the proxy --------------------------------------------------------------------------

    def _handle(self, handler):
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length)
        params = dict(urllib.parse.parse_qsl(body.decode(), keep_blank_values=True))
        action = params.get("Action", "")
        region = self._region(handler)
        with self.lock:
            self.requests.append({"action": action, "params": params, "region": region})
        for failure in self.failures:
            if failure["action"] != action or failure["left"] == 0:
                continue
            if failure["when"] is None or failure["when"](params):
                if failure["left"] is not None:
                    failure["left"] -= 1
                status = 500 if failure["code"].startswith("Insufficient") else 400
                return self._error(handler, status, failure["code"], failure["message"])
        own = getattr(self, "_" + action, None)
        if own is not None:
            return own(handler, params, region)
        if action == "ImportKeyPair":
            self.keys[(region, params.get("KeyName"))] = base64.b64decode(
                params.get("PublicKeyMaterial", "")).decode()
        if action == "RunInstances":
            return self._run_instances(handler, params, region, body)
        if action == "TerminateInstances" and self.unbacking is not None:
            # Before answering, so that whoever terminated finds the hosts gone.
            for instance_id in _indexed(params, "InstanceId"):
                self.unbacking(instance_id)
        return self._forward(handler, body)

    def _run_instances(self, handler, params, region, body):
        if params.get("Placement.GroupName"):
            key = (region, params["Placement.GroupName"])
            if key not in self.placement_groups:
                return self._error(handler, 400, "InvalidPlacementGroup.Unknown",
                                   "The placement group '%s' is unknown." % key[1])
        token = params.get("ClientToken")
        if token and token in self.launches:
            first, answer = self.launches[token]
            if first != params:
                return self._error(handler, 400, "IdempotentParameterMismatch",
                                   "The client token %s was used with other parameters." % token)
            return self._send(handler, 200, answer)
        wanted = int(params.get("MaxCount", 1))
        available = self.capacity.get(params.get("Placement.AvailabilityZone"), wanted)
        count = min(wanted, available)
        if count < int(params.get("MinCount", 1)):
            return self._error(handler, 500, "InsufficientInstanceCapacity",
                               "We currently do not have sufficient capacity in the "
                               "Availability Zone you requested.")
        body = urllib.parse.urlencode(dict(params, MinCount=str(count),
                                           MaxCount=str(count))).encode()
        status, answer = self._forward(handler, body, back=(region, params))
        if token and status == 200:
            self.launches[token] = (params, answer)
        return None

    def _back(self, region, params, text):
        """Start a real host for each instance of a launch answer; map moto's addresses."""
        import boto3  # pylint: disable=import-outside-toplevel

        ids = re.findall(r"<instanceId>(i-[0-9a-f]+)</instanceId>", text)
        if not ids:
            return
        moto = boto3.client("ec2", region_name=region, endpoint_url="http://127.0.0.1:%d"
                            % self.moto_port, aws_access_key_id="testing",
                            aws_secret_access_key="testing")
        found = moto.describe_instances(InstanceIds=sorted(set(ids)))
        public_key = self.keys.get((region, params.get("KeyName")), "")
        for reservation in found["Reservations"]:
            for instance in reservation["Instances"]:
                address = self.backing(instance["InstanceId"], public_key)
                for moto_address in (instance.get("PrivateIpAddress"),
                                     instance.get("PublicIpAddress")):
                    if moto_address:
                        self.addresses[moto_address] = address

    def _rewrite(self, text):
        for moto_address, address in self.addresses.items():
            text = text.replace(">%s<" % moto_address, ">%s<" % address)
        return text

    @staticmethod
    def _region(handler):
        auth = handler.headers.get("Authorization") or ""
        # Credential=KEY/DATE/REGION/SERVICE/aws4_request
        try:
            return auth.split("Credential=", 1)[1].split("/")[2]
        except IndexError:
            return "us-east-1"

    def _forward(self, handler, body, back=None):
        if "Content-Length" in handler.headers:
            handler.headers.replace_header("Content-Length", str(len(body)))
        connection = http.client.HTTPConnection("127.0.0.1", self.moto_port, timeout=60)
        headers = dict((k, v) for k, v in handler.headers.items() if k.lower() != "host")
        headers["Host"] = "127.0.0.1:%d" % self.moto_port
        connection.request(handler.command, handler.path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
        if back is not None and self.backing is not None and response.status == 200:
            self._back(back[0], back[1], data.decode())
        if self.addresses:
            data = self._rewrite(data.decode()).encode()
        handler.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
        connection.close()
        return response.status, data.decode()

    @staticmethod
    def _send(handler, status, xml):
        data = xml.encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "text/xml")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _error(self, handler, status, code, message):
        self._send(handler, status,
                   '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>%s'
                   "</Code><Message>%s</Message></Error></Errors><RequestID>%s</RequestID>"
                   "</Response>" % (escape(code), escape(message), uuid.uuid4()))

    def _ok(self, handler, action, inner):
        self._send(handler, 200, '<?xml version="1.0" encoding="UTF-8"?><%sResponse xmlns="%s">'
                                 "<requestId>%s</requestId>%s</%sResponse>"
                   % (action, EC2_NS, uuid.uuid4(), inner, action))

    # -- placement groups (moto has none) ----------------------------------------------------

    def _group_xml(self, group):
        tags = "".join("<item><key>%s</key><value>%s</value></item>" % (escape(k), escape(v))
                       for k, v in sorted(group["tags"].items()))
        return ("<item><groupName>%s</groupName><groupId>%s</groupId><strategy>%s</strategy>"
                "<state>available</state><tagSet>%s</tagSet></item>"
                % (escape(group["name"]), group["id"], group["strategy"], tags))

    def _CreatePlacementGroup(self, handler, params, region):
        name = params.get("GroupName")
        key = (region, name)
        if key in self.placement_groups:
            return self._error(handler, 400, "InvalidPlacementGroup.Duplicate",
                               "The placement group '%s' already exists." % name)
        group = {"name": name, "id": "pg-" + uuid.uuid4().hex[:17],
                 "strategy": params.get("Strategy", "cluster"),
                 "tags": _tags_of(params, "placement-group")}
        self.placement_groups[key] = group
        return self._ok(handler, "CreatePlacementGroup",
                        "<placementGroup>%s</placementGroup>"
                        % self._group_xml(group)[len("<item>"):-len("</item>")])

    def _DescribePlacementGroups(self, handler, params, region):
        names = set(_indexed(params, "GroupName"))
        filters = {}
        number = 1
        while "Filter.%d.Name" % number in params:
            filters[params["Filter.%d.Name" % number]] = set(
                _indexed(params, "Filter.%d.Value" % number))
            number += 1
        found = []
        for (group_region, name), group in sorted(self.placement_groups.items()):
            if group_region != region or (names and name not in names):
                continue
            if any(not key.startswith("tag:") or group["tags"].get(key[4:]) not in values
                   for key, values in filters.items()):
                continue
            found.append(group)
        missing = names - set(g["name"] for g in found)
        if missing:
            return self._error(handler, 400, "InvalidPlacementGroup.Unknown",
                               "The placement group '%s' is unknown." % sorted(missing)[0])
        return self._ok(handler, "DescribePlacementGroups", "<placementGroupSet>%s"
                        "</placementGroupSet>" % "".join(self._group_xml(g) for g in found))

    def _DescribeCapacityReservations(self, handler, params, region):
        wanted = _indexed(params, "CapacityReservationId")
        items = []
        for reservation_id in wanted:
            found = self.reservations.get((region, reservation_id))
            if found is None:
                return self._error(handler, 400, "InvalidCapacityReservationId.NotFound",
                                   "The capacity reservation %s does not exist." % reservation_id)
            items.append(
                "<item><capacityReservationId>%s</capacityReservationId><instanceType>%s"
                "</instanceType><availabilityZone>%s</availabilityZone><state>%s</state>"
                "<reservationType>%s</reservationType><totalInstanceCount>%d"
                "</totalInstanceCount><availableInstanceCount>%d</availableInstanceCount></item>"
                % (reservation_id, found["instance_type"], found["zone"],
                   found.get("state", "active"), found.get("type", "default"),
                   found.get("count", 2), found.get("count", 2)))
        return self._ok(handler, "DescribeCapacityReservations",
                        "<capacityReservationSet>%s</capacityReservationSet>" % "".join(items))

    def _DeletePlacementGroup(self, handler, params, region):
        key = (region, params.get("GroupName"))
        if key not in self.placement_groups:
            return self._error(handler, 400, "InvalidPlacementGroup.Unknown",
                               "The placement group '%s' is unknown." % key[1])
        del self.placement_groups[key]
        return self._ok(handler, "DeletePlacementGroup", "<return>true</return>")
