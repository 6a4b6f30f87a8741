# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's metrics on a host: the samples each job's wrapper (tasks.hostside.wrapper) keeps in
its state folder, read within a window of the newest (the ``metrics`` request).

This file travels to the hosts after tasks.hostside.nodeside (tasks.ssh.host_source) and runs
in its namespace, so it uses the standard library only and the Python 3.6+ of any
Ansible-managed host; its operation joins nodeside's ``OPS``.
"""

import os

try:  # imported as part of the collection (tests, the controller)
    from .nodeside import _RUN_NAME, OPS, Failure, _open_regular, job_dir, op_status
except ImportError:  # on a host: nodeside's source runs first in the same namespace
    pass

# The most of a job's metrics file read in one request (its wrapper keeps far less).
METRICS_READ_MAX = 8 * 1024 * 1024


def _metrics_window(path, window):
    """The samples of a job's ``state/metrics`` (tasks.hostside.wrapper) taken within ``window``
    seconds of its newest one. The file lies in a folder the container writes: only a regular
    file is read (no link, no FIFO), and at most METRICS_READ_MAX bytes of its end."""
    fd = _open_regular(path)
    if fd is None:
        return ""
    try:
        info = os.fstat(fd)
        if info.st_size > METRICS_READ_MAX:
            os.lseek(fd, info.st_size - METRICS_READ_MAX, os.SEEK_SET)
        data = b""
        while len(data) < METRICS_READ_MAX:
            chunk = os.read(fd, 1024 * 1024)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    lines = data.decode("utf-8", "replace").splitlines()
    # Each line with the epoch of the sample it belongs to (None: before any readable header).
    stamped, epoch = [], None
    for line in lines:
        if line.startswith("@ "):
            field = line.split()[1:2]
            epoch = int(field[0]) if field and field[0].isdigit() else None
        stamped.append((epoch, line))
    stamps = [e for e, _line in stamped if e is not None]
    if not stamps:
        return ""
    since = max(stamps) - window
    return "\n".join(line for e, line in stamped if e is not None and e >= since)


def op_metrics(payload):
    """A run's containers on this host (as ``status``) and, per job, the metrics its wrapper
    sampled within ``window`` seconds of its newest sample: ``{"containers", "metrics": {job:
    text}}``. A job that ended keeps its last window (its newest samples are old)."""
    run = str(payload.get("run") or "")
    if not _RUN_NAME.match(run):
        raise Failure("metrics: bad run name %r" % run)
    window = int(payload.get("window") or 3600)
    found = op_status({"run": run})
    metrics = {}
    for entry in found["containers"]:
        job = (entry.get("labels") or {}).get("gpufleet.job")
        if job is not None and str(job).isdigit():
            metrics[str(job)] = _metrics_window(
                os.path.join(job_dir(run, int(job)), "state", "metrics"), window)
    return {"containers": found["containers"], "metrics": metrics}


OPS.update({
    "metrics": op_metrics,
})
