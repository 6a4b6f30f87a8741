"""The HTTP server Molecule's test instances download from: vendors' stand-ins and metadata.

It serves the stub repositories (stubrepo.py) as static files, and answers like the clouds'
metadata services so a role's detection runs its real requests:

* EC2 instance metadata (IMDSv2): ``PUT /latest/api/token`` then
  ``GET /latest/meta-data/instance-type`` with the token;
* Compute Engine metadata: ``GET /computeMetadata/v1/instance/machine-type`` with
  ``Metadata-Flavor: Google``.

Which instance or machine type an instance is, is set per client address in a JSON file
(``{"aws": {"10.79.1.11": "p5.48xlarge"}, "gcp": {"10.79.1.12": "a3-highgpu-8g"}}``); a client
not listed gets 404, like a host that is not on that cloud. The file is read on each request,
so a scenario may change it between converges.

    python tests/molecule/serve.py ROOT ADDRESS PORT METADATA.json
"""

from __future__ import annotations

import functools
import json
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "gpufleet-molecule-imds-token"


class Handler(SimpleHTTPRequestHandler):
    metadata_file = None

    def _metadata(self, cloud):
        try:
            with open(self.metadata_file) as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            data = {}
        return (data.get(cloud) or {}).get(self.client_address[0])

    def _answer(self, status, text=""):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):  # noqa: N802 (http.server's naming)
        if self.path == "/latest/api/token" and self._metadata("aws"):
            if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self._answer(400, "missing token TTL")
            return self._answer(200, TOKEN)
        return self._answer(404, "not found")

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/latest/"):
            instance_type = self._metadata("aws")
            if not instance_type:
                return self._answer(404, "not found")
            if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
                return self._answer(401, "IMDSv2 token required")
            if self.path == "/latest/meta-data/instance-type":
                return self._answer(200, instance_type)
            return self._answer(404, "not found")
        if self.path.startswith("/computeMetadata/"):
            machine_type = self._metadata("gcp")
            if not machine_type:
                return self._answer(404, "not found")
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._answer(403, "Metadata-Flavor: Google header required")
            if self.path == "/computeMetadata/v1/instance/machine-type":
                return self._answer(200, "projects/1234567/machineTypes/%s" % machine_type)
            return self._answer(404, "not found")
        return SimpleHTTPRequestHandler.do_GET(self)


def main(root, address, port, metadata_file):
    Handler.metadata_file = metadata_file
    handler = functools.partial(Handler, directory=root)
    server = ThreadingHTTPServer((address, int(port)), handler)
    server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit("usage: serve.py ROOT ADDRESS PORT METADATA.json")
    main(*sys.argv[1:])
