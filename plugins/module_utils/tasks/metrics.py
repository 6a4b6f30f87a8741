# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's metrics as ``dstack metrics`` shows them, from what each job's wrapper sampled.

dstack's runner samples, inside the container, the cgroup's CPU time and memory and the GPUs'
utilisation and memory (nvidia-smi, amd-smi); its server polls it every 10 seconds and keeps
the last hour of a running job. Here the wrapper (tasks.hostside.wrapper) samples the same values
every 10 seconds into the job's ``state/metrics`` on its host, and ``gpufleet metrics`` reads the
last hour of every job in one request per host (nodeside ``metrics``). No server keeps anything.

Pure Python: ``parse(text)`` reads the samples, ``job_metrics(samples, gpus)`` makes dstack's
series from them (``cpu_usage_percent`` from two consecutive samples, the memory working set
as usage minus inactive file pages, per-GPU utilisation and memory), ``run_metrics(record,
texts)`` puts a run's jobs together.
"""

from __future__ import annotations

# dstack keeps a running job's last hour.
WINDOW = 3600
MIB = 1024 * 1024


def _number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value


def _amd_rows(lines):
    """GPUs from amd-smi's ``monitor -vu --csv`` lines (a header, then one row per GPU):
    ``gfx`` is the utilisation, ``vram_used``/``vram_total`` are MB, as dstack reads them."""
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split(",")]
    gpus = []
    for line in lines[1:]:
        fields = dict(zip(header, (f.strip() for f in line.split(","))))
        gpus.append({"util": _number(fields.get("gfx")),
                     "used_mib": _number(fields.get("vram_used")),
                     "total_mib": _number(fields.get("vram_total"))})
    return gpus


def parse(text):
    """The samples in a job's ``state/metrics`` text, oldest first. A sample: ``epoch``,
    ``uptime`` (seconds, finer than epoch), ``cpu_usec``, ``memory`` and ``inactive_file``
    (bytes), ``limit`` (bytes, None for none), ``cpus``, ``memtotal`` (bytes), ``gpus``
    (``util``, ``used_mib``, ``total_mib``). Lines that cannot be read are left out (a block
    being written, a tool that printed something else)."""
    samples = []
    amd = []
    current = [False]   # whether the last header was read: its GPU lines belong to it

    def close():
        if samples and amd and current[0]:
            samples[-1]["gpus"] = _amd_rows(amd)
        del amd[:]

    for line in (text or "").splitlines():
        if line.startswith("@ "):
            close()
            fields = line.split()[1:]
            current[0] = len(fields) >= 8 and fields[0].isdigit()
            if not current[0]:
                continue
            values = [_number(f) for f in fields[:8]]
            limit = values[5]
            memtotal = values[7] * 1024 if values[7] is not None else None
            if limit is not None and memtotal is not None and limit >= memtotal:
                limit = None   # cgroup v1 writes a huge number for "no limit"
            samples.append({"epoch": int(fields[0]), "uptime": values[1],
                            "cpu_usec": values[2], "memory": values[3],
                            "inactive_file": values[4], "limit": limit,
                            "cpus": int(values[6]) if values[6] else None,
                            "memtotal": memtotal, "gpus": []})
        elif not samples or not current[0]:
            continue
        elif line.startswith("nvidia "):
            util, used, total = (line.split()[1:4] + [None] * 3)[:3]
            samples[-1]["gpus"].append({"util": _number(util), "used_mib": _number(used),
                                        "total_mib": _number(total)})
        elif line.startswith("amd "):
            amd.append(line[4:])
    close()
    return samples


def _elapsed(prev, last):
    """Seconds between two samples: by uptime when both have it (hundredths), else epoch."""
    if prev.get("uptime") is not None and last.get("uptime") is not None \
            and last["uptime"] > prev["uptime"]:
        return last["uptime"] - prev["uptime"]
    return last["epoch"] - prev["epoch"]


def cpu_percent(prev, last, cpus=None):
    """CPU use between two samples in percent of ``cpus`` CPUs (dstack's ``cpu_usage_percent``,
    100 per busy CPU, divided by the CPUs the job was given, as its CLI shows it; without
    ``cpus``, those the container sees); None when unknown."""
    if prev.get("cpu_usec") is None or last.get("cpu_usec") is None:
        return None
    seconds = _elapsed(prev, last)
    if seconds <= 0 or last["cpu_usec"] < prev["cpu_usec"]:
        return None
    percent = (last["cpu_usec"] - prev["cpu_usec"]) / (seconds * 1e6) * 100
    return round(percent / (cpus or last.get("cpus") or 1), 1)


def job_metrics(samples, resources=None, since=None):
    """dstack's series for one job from its samples (those at ``since`` or later): each a list
    of ``[epoch, value]``. ``resources``: what the job was given (tasks.container.resources_of:
    ``cpus`` for the CPU share, ``gpu_count`` and ``gpu_memory_mib`` for GPUs no tool
    reported)."""
    resources = resources if isinstance(resources, dict) else {}
    cpus = resources.get("cpus") if isinstance(resources.get("cpus"), int) else None
    if since is not None:
        keep = [s for s in samples if s["epoch"] >= since]
        # One sample before the window gives the first CPU value in it.
        earlier = [s for s in samples if s["epoch"] < since]
        samples = earlier[-1:] + keep if keep else []
    cpu, memory, devices = [], [], []
    total = None
    for index, sample in enumerate(samples):
        stamp = sample["epoch"]
        if index:
            value = cpu_percent(samples[index - 1], sample, cpus)
            if value is not None:
                cpu.append([stamp, value])
        if since is not None and stamp < since:
            continue
        if sample.get("memory") is not None:
            memory.append([stamp, int(sample["memory"] - (sample.get("inactive_file") or 0))])
        total = sample.get("limit") or sample.get("memtotal") or total
        for num, gpu in enumerate(sample.get("gpus") or []):
            while len(devices) <= num:
                devices.append({"index": len(devices), "util_percent": [], "memory_bytes": [],
                                "memory_total_bytes": None})
            if gpu.get("util") is not None:
                devices[num]["util_percent"].append([stamp, gpu["util"]])
            if gpu.get("used_mib") is not None:
                devices[num]["memory_bytes"].append([stamp, int(gpu["used_mib"] * MIB)])
            if gpu.get("total_mib"):
                devices[num]["memory_total_bytes"] = int(gpu["total_mib"] * MIB)
    count = resources.get("gpu_count") if isinstance(resources.get("gpu_count"), int) else 0
    while len(devices) < count:   # GPUs the job has that no sample showed (no tool)
        devices.append({"index": len(devices), "util_percent": [], "memory_bytes": [],
                        "memory_total_bytes": None})
    per_gpu = resources.get("gpu_memory_mib")
    for device in devices:
        if device["memory_total_bytes"] is None and isinstance(per_gpu, (int, float)) \
                and per_gpu > 0:
            device["memory_total_bytes"] = int(per_gpu * MIB)
    return {"cpu_percent": cpu, "memory_bytes": memory,
            "memory_total_bytes": int(total) if total else None,
            "cpus": cpus or (samples[-1].get("cpus") if samples else None), "gpus": devices}


def newest(texts_samples):
    """The epoch of the newest sample among ``{job: samples}``, or None."""
    stamps = [s[-1]["epoch"] for s in texts_samples.values() if s]
    return max(stamps) if stamps else None


def run_metrics(record, texts, job=None):
    """The metrics record of run ``record`` (tasks.listing) from ``{job_num: text}``: the
    run's name and status and, per job (only ``job`` when given), its host, status and series
    over the last hour before the newest sample."""
    samples = dict((int(num), parse(text)) for num, text in (texts or {}).items())
    last = newest(samples)
    since = last - WINDOW if last is not None else None
    jobs = []
    for entry in record.get("jobs") or []:
        num = entry["job_num"]
        if job is not None and num != job:
            continue
        series = job_metrics(samples.get(num) or [], entry.get("resources"), since)
        jobs.append(dict(series, job_num=num, host=entry.get("host"),
                         status=entry.get("status")))
    return {"run": record.get("name"), "status": record.get("status"), "jobs": jobs,
            "newest": last}
