# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the task runner does on a fleet host, as root: one short Python process per request.

The controller sends this file's source and a JSON request on the standard input of
``python3 -S -c BOOTSTRAP`` (tasks.hostside.bootstrap, see tasks.ssh.Node.call); nothing else
keeps running on the host besides the run's containers (the compiled source is kept in
HELPER_CACHE). Standard library only, Python 3.6+; every answer is one JSON line. The parts
sent with it (volumeside, metricside, booking and the files sent with booking) add their
operations to OPS or booking's BOOK_OPS; proxyside (the in-fleet proxy) has its PROXY_OPS.
The Docker engine (the CLI, its API) and ``Failure`` are engineside's, sent before this file.

The run's state lives with the containers (labels: run, job, submission) and each job's state
folder (``RUN_ROOT/<run>/<job>/state``): when its command began, why it stopped, its code.
"""

import json
import os
import re
import stat
import sys
import time

# subprocess, shutil and base64 are imported where used: every request runs this module's top
# level, and most need none of them (7 ms of a request's 40 on a host).

try:  # imported as part of the collection (tests, the controller)
    from .engineside import (Failure, _EngineUnavailable, _container_exists, _container_ids,
                             _docker, _engine, _inspect_all, _remove_containers)
except ImportError:  # on a host: engineside, sent before this file, runs in the same namespace
    pass

RUN_ROOT = "/var/lib/gpufleet/runs"
RUN_LABEL = "gpufleet.run"
# A service replica's label (tasks.container): its start keeps RESPAWN_KEYS of the job, so that
# respawn can make the replica again.
SERVICE_LABEL = "gpufleet.service"
RESPAWN_KEYS = ("container", "image", "docker_args", "mounts", "conditional", "claim", "run",
                "job_num", "placed", "config_digest", "resources")


STATE_FILES = ("running", "reason", "exit_code")
# Host features a container gets when the host has them
# (docs/reference/dstack-runtime.md#container-start).
CONDITIONAL = {
    "infiniband": ("/dev/infiniband", ["--device", "/dev/infiniband", "--ulimit",
                                       "memlock=-1:-1"]),
    "hugepages-1g": ("/dev/hugepages-1G", ["-v", "/dev/hugepages-1G:/dev/hugepages-1G"]),
}


def job_dir(run, job_num):
    return os.path.join(RUN_ROOT, run, str(job_num))


def _read_state(run, job_num):
    folder = os.path.join(job_dir(run, job_num), "state")
    found = {}
    for name in STATE_FILES:
        try:
            with open(os.path.join(folder, name)) as handle:
                found[name] = handle.read().strip() or None
        except (IOError, OSError):
            found[name] = None
    # A service's replica count since a scale-down, when its labels say more (booking's
    # ``recount``): in the job's folder, which a respawn keeps.
    counted = (_small_file(os.path.join(job_dir(run, job_num), "replicas")) or "").strip()
    if counted.isdigit():
        found["replicas"] = counted
    # Where its service is published since its proxy host was lost (replicaside's repoint).
    moved = _json_file(os.path.join(job_dir(run, job_num), "proxy.json"))
    if isinstance(moved, dict) and moved.get("proxy_host"):
        found["proxy"] = moved
    return found


def op_status(payload):
    """The task containers on this host (of one run, or of all runs), with their state files."""
    selector = RUN_LABEL + ("=" + payload["run"] if payload.get("run") else "")
    ids = _container_ids(selector)
    containers = []
    if ids:
        for item in _inspect_all(ids):
            labels = (item.get("Config") or {}).get("Labels") or {}
            st = item.get("State") or {}
            entry = {
                "name": (item.get("Name") or "").lstrip("/"),
                "labels": labels,
                "state": st.get("Status"),
                "exit_code": st.get("ExitCode"),
                "oom_killed": bool(st.get("OOMKilled")),
                "started_at": st.get("StartedAt"),
                "finished_at": st.get("FinishedAt"),
                "error": st.get("Error") or None,
                # Where the container's sshd and ports are, seen from this host (attach).
                "address": _address(item),
            }
            published = _published(item)
            if published:
                # A service's replica: the host ports its container's ports are published on.
                entry["published"] = published
            if labels.get(RUN_LABEL) and labels.get("gpufleet.job") is not None:
                entry["files"] = _read_state(labels[RUN_LABEL], labels["gpufleet.job"])
            containers.append(entry)
    containers += _folder_jobs(payload.get("run"), set(c["name"] for c in containers))
    return {"containers": containers}


def _folder_jobs(run, names):
    """Jobs whose container is not there while their folder is: the container could not be
    created (``state/setup_error``), or it was removed by hand. ``record.json`` (written by
    ``start``) gives their name and labels; their state folder says how they ended. A folder
    that has neither ``created`` nor ``setup_error`` is a start under way, and left out."""
    runs = [run] if run else _listdir(RUN_ROOT)
    found = []
    for name in runs:
        if not _RUN_NAME.match(name or ""):
            continue
        for job in _listdir(os.path.join(RUN_ROOT, name)):
            if not job.isdigit():
                continue
            if "%s-%s-0" % (name, job) in names:
                continue   # its container is there (the name tasks.container gives it)
            folder = job_dir(name, int(job))
            record = _json_file(os.path.join(folder, "record.json"))
            if not record or record.get("container") in names:
                continue
            setup_error = _small_file(os.path.join(folder, "state", "setup_error"))
            created = os.path.join(folder, "created")
            if setup_error is None and not os.path.exists(created):
                continue
            moments = [m for m in (_mtime(os.path.join(folder, "state", n))
                                   for n in ("exit_code", "reason", "setup_error")) if m]
            found.append({
                "name": record.get("container"), "labels": record.get("labels") or {},
                "state": "gone" if setup_error is None else "never-created",
                "exit_code": None, "oom_killed": False, "started_at": _mtime(created),
                "finished_at": max(moments) if moments else None, "error": setup_error,
                "address": None, "files": _read_state(name, int(job)),
                "setup_error": setup_error})
    return found


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _mtime(path):
    """A file's modification time as Docker writes times (RFC 3339, UTC), or None."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.stat(path).st_mtime))
    except OSError:
        return None


def _open_regular(path):
    """A read-only descriptor of a regular file of a job folder, which the container writes
    (no link followed, no FIFO opened), or None."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _small_file(path, limit=65536):
    """The text of a regular file of the job folder (no link followed), or None."""
    fd = _open_regular(path)
    if fd is None:
        return None
    try:
        return os.read(fd, limit).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)


def _json_file(path):
    text = _small_file(path)
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _published(item):
    """``{"PORT/tcp": host port}`` of the container's published ports (the first binding of
    each), from ``docker inspect``'s NetworkSettings.Ports; {} when none."""
    ports = (item.get("NetworkSettings") or {}).get("Ports") or {}
    out = {}
    for key in sorted(ports):
        for binding in ports[key] or []:
            text = str((binding or {}).get("HostPort") or "")
            if text.isdigit():
                out[key] = int(text)
                break
    return out


def _address(item):
    """``localhost`` for a container on the host's network, else its first bridge address."""
    if ((item.get("HostConfig") or {}).get("NetworkMode") or "") == "host":
        return "localhost"
    networks = (item.get("NetworkSettings") or {}).get("Networks") or {}
    for name in sorted(networks):
        if (networks[name] or {}).get("IPAddress"):
            return networks[name]["IPAddress"]
    return None


_RUN_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,99}\Z")


def _job_key(payload, op):
    """``(run, job number)`` of a request about one job, checked (a Failure naming ``op``)."""
    run, num = str(payload.get("run") or ""), payload.get("job_num")
    if not _RUN_NAME.match(run) or not isinstance(num, int) or num < 0:
        raise Failure("%s: bad run %r or job %r" % (op, run, num))
    return run, num


def op_run_key(payload):
    """The private key of a run's job (its job folder's ``ssh/dstack_job``), for attach."""
    run, job_num = _job_key(payload, "run_key")
    path = os.path.join(job_dir(run, job_num), "job", "ssh", "dstack_job")
    try:
        with open(path) as handle:
            return {"key": handle.read()}
    except (IOError, OSError):
        return {"key": None}


def op_image_info(payload):
    """Whether the host has ``image``, and its ENTRYPOINT, CMD and WORKDIR."""
    try:
        status, value = _engine("GET", "/images/%s/json" % payload["image"])
        if status != 200 or not isinstance(value, dict):
            return {"present": False}
        config = value.get("Config") or {}
        return {"present": True, "entrypoint": config.get("Entrypoint"),
                "cmd": config.get("Cmd"), "working_dir": config.get("WorkingDir")}
    except _EngineUnavailable:
        pass
    rc, out, _err = _docker(["image", "inspect", "--format",
                             "{{json .Config.Entrypoint}}\t{{json .Config.Cmd}}\t"
                             "{{json .Config.WorkingDir}}", payload["image"]], check=False)
    if rc != 0:
        return {"present": False}
    entry, cmd, workdir = (out.strip().split("\t") + ["null", "null", "null"])[:3]
    return {"present": True, "entrypoint": json.loads(entry), "cmd": json.loads(cmd),
            "working_dir": json.loads(workdir)}


def op_pull(payload):
    """``docker pull`` (after ``docker login`` when credentials come with the request)."""
    auth = payload.get("auth")
    image = payload["image"]
    if auth:
        first = image.split("/")[0]
        # Docker takes the first part of a name for a registry when it has a dot or a port, or
        # is localhost; otherwise the image is on Docker Hub.
        registry = first if "/" in image and (
            "." in first or ":" in first or first == "localhost") else ""
        args = ["login", "--username", auth["username"], "--password-stdin"]
        if registry:
            args.append(registry)
        rc, _out, err = _docker(args, data=auth["password"].encode("utf-8"), check=False)
        if rc != 0:
            return {"pulled": False, "message": "registry login failed: %s"
                    % err.strip().replace(auth["password"], "***")[-500:]}
    rc, _out, err = _docker(["pull", image], check=False)
    if auth:
        # The credentials were for this pull only: do not leave them in root's docker config.
        _docker(["logout"] + ([registry] if registry else []), check=False)
    return {"pulled": rc == 0, "message": err.strip()[-500:] if rc else ""}


def _write(path, data, mode):
    try:
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            os.makedirs(folder, 0o755)
        with open(path, "wb") as handle:
            handle.write(data)
        os.chmod(path, mode)
    except (IOError, OSError) as exc:
        raise Failure("cannot write %s on this host: %s" % (path, exc)) from exc


def _place(path, item):
    """A folder (``dir``, with its ``mode``) or a relative link (``link``) in a job folder:
    what a folder of the task's files holds besides its files (repos.files)."""
    try:
        if item.get("dir"):
            if not os.path.isdir(path):
                os.makedirs(path, 0o755)
            os.chmod(path, item.get("mode", 0o755))
            return
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            os.makedirs(folder, 0o755)
        os.symlink(item["link"], path)
    except (IOError, OSError) as exc:
        raise Failure("cannot write %s on this host: %s" % (path, exc)) from exc


def _prepare_mount(mount):
    source = mount["source"]
    if mount["kind"] == "instance":
        if not os.path.isdir(source):
            # dstack: a missing host folder is created 0755 and its leaf opened to everyone.
            try:
                os.makedirs(source, 0o755)
                os.chmod(source, 0o777)
            except (IOError, OSError) as exc:
                raise Failure("instance volume %s: cannot create the folder on this host (%s); "
                              "fix the path in volumes" % (source, exc)) from exc
        return ["-v", "%s:%s" % (source, mount["target"])]
    if not os.path.isdir(source):
        raise Failure("network volume %s is not attached to this host (expected at %s): "
                      "attach it, or remove it from volumes" % (mount.get("name"), source))
    return ["-v", "%s:%s" % (source, mount["target"])]


def _link_repo(archive, target):
    """The run's code archive (shipped to REPOS_ROOT by the controller) in the job folder: a hard
    link, so the archive stays while a job folder holds it, else a copy."""
    if not os.path.isfile(archive):
        raise Failure("the run's repo archive %s is not on this host (removed meanwhile?); "
                      "submit the run again" % archive)
    folder = os.path.dirname(target)
    try:
        if not os.path.isdir(folder):   # a job without files of its own
            os.makedirs(folder, 0o755)
        os.link(archive, target)
    except OSError:
        try:
            import shutil

            shutil.copyfile(archive, target)
        except (IOError, OSError) as exc:
            raise Failure("cannot put the repo archive in the job folder: %s" % exc) from exc
    os.chmod(target, 0o644)


def op_start(payload):
    """Write a job's folder and start its container (idempotent: an existing one is kept)."""
    job = payload["job"]
    folder = job_dir(job["run"], job["job_num"])
    name = job["container"]
    if _container_exists(name):
        return {"started": False, "exists": True}
    import base64
    import shutil

    if os.path.isdir(folder):
        shutil.rmtree(folder)
    for rel, item in sorted(job["files"].items()):
        path = os.path.join(folder, "job", rel)
        if item.get("dir") or "link" in item:   # a folder of files, and links in it
            _place(path, item)
            continue
        if "data" in item:
            data = base64.b64decode(item["data"])
        else:
            data = item["text"].encode("utf-8")
        _write(path, data, item.get("mode", 0o644))
    if job.get("repo_archive"):
        _link_repo(job["repo_archive"], os.path.join(folder, "job", "repo.tar.gz"))
    os.makedirs(os.path.join(folder, "state"), 0o755)
    # The state folder is mounted inside the read-only job folder: its mount point must exist.
    mountpoint = os.path.join(folder, "job", "state")
    if not os.path.isdir(mountpoint):
        os.makedirs(mountpoint, 0o755)
    # What status reports of this job if its container is never made or goes away.
    labels = dict(value.split("=", 1) for flag, value in zip(job["docker_args"],
                                                             job["docker_args"][1:])
                  if flag == "--label" and "=" in value)
    _write(os.path.join(folder, "record.json"),
           json.dumps({"container": name, "labels": labels}).encode("utf-8"), 0o644)
    if labels.get(SERVICE_LABEL) or job.get("hold"):
        # What respawn needs to make a service's replica again (its files stay in the folder),
        # or a schedule to start a held job (scheduleside).
        _write(os.path.join(folder, "start.json"), json.dumps(dict(
            (key, job.get(key)) for key in RESPAWN_KEYS)).encode("utf-8"), 0o600)
    return {"started": False, "held": True} if job.get("hold") else _run_container(job, folder)


def _run_container(job, folder):
    """``docker run`` of a job whose folder is written."""
    name = job["container"]
    args = ["run", "-d"] + list(job["docker_args"])
    args += ["-v", "%s:/gpufleet:ro" % os.path.join(folder, "job"),
             "-v", "%s:/gpufleet/state" % os.path.join(folder, "state")]
    for mount in job.get("mounts") or []:
        args += _prepare_mount(mount)
    for feature in job.get("conditional") or []:
        path, flags = CONDITIONAL[feature]
        if os.path.exists(path):
            args += flags
    args += [job["image"], "/gpufleet/job.sh"]
    rc, out, err = _docker(args, check=False)
    if rc != 0:
        if "is already in use" in err:
            return {"started": False, "exists": True}
        _docker(["rm", "-f", name], check=False)
        message = "could not start container %s: %s" % (name, err.strip()[-1500:])
        _write(os.path.join(folder, "state", "setup_error"),
               (message + "\n").encode("utf-8"), 0o644)
        raise Failure(message)
    _write(os.path.join(folder, "created"), (out.strip() + "\n").encode("utf-8"), 0o644)
    return {"started": True, "id": out.strip()}


def op_record_failure(payload):
    """Leave a job that could not be set up (its image could not be brought) as its folder:
    ``record.json`` and ``state/setup_error``, which status reports (``never-created``)."""
    run, num = _job_key(payload, "record_failure")
    folder = job_dir(run, num)
    if os.path.isdir(folder):
        import shutil

        shutil.rmtree(folder)
    _write(os.path.join(folder, "record.json"), json.dumps({
        "container": str(payload.get("container") or ""),
        "labels": dict((str(k), str(v)) for k, v in (payload.get("labels") or {}).items())
    }).encode("utf-8"), 0o644)
    _write(os.path.join(folder, "state", "setup_error"),
           (str(payload.get("error") or "setup failed") + "\n").encode("utf-8"), 0o644)
    return {"recorded": True}


def op_stop(payload):
    """Stop containers: the reason is recorded first (unless one is), then ``docker stop`` (TERM,
    KILL after ``timeout`` s). A job whose command ended (``ended``) gets it as ``run_stopped``,
    and 10 s at least: job 0 of a multi-node run may wait for the others (wrapper_peers)."""
    names, ended, by_wait = [], [], {}
    timeout = int(payload.get("timeout", 10))
    for item in payload["jobs"]:
        folder = os.path.join(job_dir(item["run"], item["job_num"]), "state")
        done = os.path.exists(os.path.join(folder, "exit_code"))
        if done:
            ended.append(item["job_num"])
        reason_file = os.path.join(folder, "run_stopped" if done else "reason")
        if os.path.isdir(folder) and not os.path.exists(reason_file):
            _write(reason_file, (payload["reason"] + "\n").encode("utf-8"), 0o644)
        names.append(item["container"])
        by_wait.setdefault(max(timeout, 10) if done else timeout, []).append(item["container"])
    for wait, chosen in sorted(by_wait.items()):
        _docker(["stop", "-t", str(wait)] + chosen, check=False)
    return {"stopped": names, "ended": ended}


def op_remove(payload):
    """Remove a run's containers and folders on this host (all jobs, or those listed)."""
    run = payload.get("run")
    if not run or "/" in run or run.startswith("."):
        raise Failure("remove needs a run name, got %r" % (run,))
    status = op_status({"run": run})["containers"]
    jobs = payload.get("jobs")
    names = [c["name"] for c in status
             if jobs is None or str(c["labels"].get("gpufleet.job")) in [str(j) for j in jobs]]
    if names:
        _remove_containers(names)
    import shutil

    if jobs is None:
        shutil.rmtree(os.path.join(RUN_ROOT, run), ignore_errors=True)
    else:
        for num in jobs:
            shutil.rmtree(job_dir(run, num), ignore_errors=True)
    return {"removed": names}


OPS = {
    "status": op_status,
    "image_info": op_image_info,
    "pull": op_pull,
    "start": op_start,
    "stop": op_stop,
    "remove": op_remove,
    "record_failure": op_record_failure,
    "run_key": op_run_key,
}


def serve(request):
    op = None
    try:
        data = json.loads(request.decode("utf-8"))
        op = data["op"]
        ops = dict(OPS)
        ops.update(globals().get("BOOK_OPS") or {})  # tasks.hostside.booking, sent along (tasks.ssh)
        ops.update(globals().get("PROXY_OPS") or {})  # tasks.hostside.proxyside, sent along too
        answer = ops[op](data.get("payload") or {})
    except Failure as exc:
        answer = {"error": str(exc)}
    except Exception as exc:  # one JSON answer whatever happens, never a traceback
        answer = {"error": "%s failed on this host: %s: %s" % (op, type(exc).__name__, exc)}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
