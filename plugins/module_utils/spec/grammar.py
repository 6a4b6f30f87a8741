# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dstack's resource grammar: ranges, memory sizes, cpu, gpu, disk, shm_size, durations.

Every parser takes ``(value, ctx)`` and returns plain JSON-ready data:

* a range is ``{"min": x, "max": y}`` with None for an open end (an exact value has min == max);
* memory, disk, GPU memory and shm_size are GB as numbers (``512MB`` is 0.5, ``1TB`` is 1024);
* durations are seconds, or the string ``"off"``.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

from . import gpus
from ._errors import INVALID, Ctx, Invalid, Parser, describe, show
from ._types import (
    MAX_NUMBER_TEXT,
    check_magnitude,
    parse_fields,
    parse_object,
    want_int,
    want_list,
    want_mapping,
    want_str,
)

# ---------------------------------------------------------------------------------------------
# Numbers


def gb(value: float) -> int | float:
    """Render a GB quantity: integral values as int, others as float."""
    return int(value) if float(value).is_integer() else float(value)


_MEMORY_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?(tb|gb|mb)?")
_MEMORY_UNITS = {"tb": 1024.0, "gb": 1.0, "mb": 1.0 / 1024, None: 1.0}


def parse_memory(value: object) -> int | float:
    """A size in GB from ``16GB``, ``512MB``, ``1 TB``, ``1.5`` (GB) or a number."""
    if isinstance(value, bool):
        raise Invalid("expected a size such as 16GB, 512MB or 1TB, got %s" % describe(value))
    if isinstance(value, (int, float)):
        check_magnitude(value)
        size = float(value)
    elif isinstance(value, str):
        text = value.replace(" ", "").lower()
        match = _MEMORY_RE.fullmatch(text) if len(text) <= MAX_NUMBER_TEXT else None
        if not match:
            raise Invalid(
                "invalid size %s: write a number with MB, GB or TB (GiB, G and KB are not "
                "accepted), e.g. 16GB or 512MB" % show(value)
            )
        size = float(match.group(1) + (match.group(2) or "")) * _MEMORY_UNITS[match.group(3)]
    else:
        raise Invalid("expected a size such as 16GB, 512MB or 1TB, got %s" % describe(value))
    if not math.isfinite(size):
        raise Invalid("size %s is not a finite number" % show(value))
    if size < 0:
        raise Invalid("size must not be negative, got %s" % show(value))
    return gb(size)


def parse_count(value: object) -> int:
    """A non-negative whole count (CPUs, GPUs)."""
    number = want_int(value, what="a whole number")
    if number < 0:
        raise Invalid("must not be negative, got %s" % show(value))
    return number


# ---------------------------------------------------------------------------------------------
# Ranges


def parse_range(scalar: Callable[[Any], Any], unit_hint: str) -> Parser:
    """A parser for ``a..b`` / ``a..`` / ``..b`` / exact ``a`` / ``{min, max}``.

    ``scalar(text_or_number)`` parses one end; ``unit_hint`` is an example used in messages.
    """

    def parse(value, ctx):
        if isinstance(value, bool) or value is None:
            raise Invalid(
                "expected a value or a range such as %s, got %s" % (unit_hint, describe(value))
            )
        if isinstance(value, str) and ".." in value:
            text = value.replace(" ", "")
            parts = text.split("..")
            if len(parts) != 2:
                raise Invalid("invalid range %s: write min..max, min.. or ..max" % show(value))
            low = scalar(parts[0]) if parts[0] else None
            high = scalar(parts[1]) if parts[1] else None
        elif isinstance(value, (str, int, float)):
            low = high = scalar(value)
        elif isinstance(value, dict):
            data = want_mapping(value)
            fields = {"min": _end(scalar), "max": _end(scalar)}
            parsed = parse_fields(data, ctx, fields)
            if any(v is INVALID for v in parsed.values()):
                return INVALID
            low, high = parsed.get("min"), parsed.get("max")
        else:
            raise Invalid(
                "expected a value or a range such as %s, got %s" % (unit_hint, describe(value))
            )
        if low is None and high is None:
            raise Invalid("invalid empty range: give at least one end, e.g. %s" % unit_hint)
        if low is not None and high is not None and low > high:
            raise Invalid("invalid range order: %s..%s (min is above max)" % (low, high))
        return {"min": low, "max": high}

    return parse


def _end(scalar):
    def parse(value, ctx):
        return None if value is None else scalar(value)

    return parse


count_range = parse_range(parse_count, "2, 2.. or 1..8")
memory_range = parse_range(parse_memory, "16GB, 8GB.. or 40GB..80GB")


def at_least(value: int | float) -> dict[str, Any]:
    return {"min": value, "max": None}


# ---------------------------------------------------------------------------------------------
# CPU

CPU_ARCHES = ("x86", "arm")


def default_cpu_count() -> dict[str, Any]:
    return at_least(2)


def _cpu_arch(token, whole):
    arch = token.lower()
    if arch not in CPU_ARCHES:
        raise Invalid(
            "invalid CPU architecture %s in %s: use x86 or arm" % (show(token), show(whole))
        )
    return arch


def parse_cpu(value: object, ctx: Ctx) -> Any:
    """``cpu: 4``, ``16..``, ``x86:2``, ``2..:arm``, ``{min, max}`` or ``{arch, count}``."""
    if isinstance(value, bool) or value is None:
        raise Invalid(
            "expected a CPU spec such as 4, 8.., x86:4 or arm:2.., got %s" % describe(value)
        )
    if isinstance(value, float):
        raise Invalid("expected a whole number of CPUs, got %s" % show(value))
    if isinstance(value, int):
        value = str(check_magnitude(value))
    if isinstance(value, str):
        spec = {}
        for token in value.replace(" ", "").split(":"):
            if not token:
                raise Invalid("CPU spec contains an empty token: %s" % show(value))
            if ".." in token or token.isdigit():
                if "count" in spec:
                    raise Invalid("CPU spec count conflict: %s gives the count twice" % show(value))
                spec["count"] = count_range(token, ctx)
            else:
                if "arch" in spec:
                    raise Invalid(
                        "CPU spec arch conflict: %s gives the architecture twice" % show(value)
                    )
                spec["arch"] = _cpu_arch(token, value)
        return {"arch": spec.get("arch"), "count": spec.get("count") or default_cpu_count()}
    if isinstance(value, dict):
        data = want_mapping(value)
        if data and set(data) <= {"min", "max"}:
            count = count_range(data, ctx)
            return INVALID if count is INVALID else {"arch": None, "count": count}
        parsed = parse_fields(
            data, ctx, {"arch": _cpu_arch_field, "count": count_range}
        )
        if any(v is INVALID for v in parsed.values()):
            return INVALID
        return {"arch": parsed.get("arch"), "count": parsed.get("count") or default_cpu_count()}
    raise Invalid("expected a CPU spec such as 4, 8.., x86:4 or arm:2.., got %s" % describe(value))


def _cpu_arch_field(value, ctx):
    if value is None:
        return None
    return _cpu_arch(want_str(value), value)


# ---------------------------------------------------------------------------------------------
# GPU


def _gpu_vendor(value):
    text = want_str(value, "a vendor name")
    vendor = gpus.vendor_from_token(text)
    if vendor is None:
        raise Invalid(
            "unknown GPU vendor %s: use one of %s (or the aliases tpu, tt)"
            % (show(value), ", ".join(gpus.VENDORS))
        )
    return vendor


def _gpu_names(names, ctx, whole=None):
    out = []
    for index, name in enumerate(names):
        if not isinstance(name, str):
            raise Invalid("a GPU name must be a string, got %s" % describe(name), (index,))
        if not name:
            raise Invalid("GPU name can not be empty: %s" % show(whole if whole else name))
        if name.startswith("tpu-"):
            name = name[4:]
            ctx.warn("the tpu- prefix in GPU names is deprecated; write the vendor instead (tpu:%s)" % name)
        out.append(name)
    return out


def _gpu_name_field(value, ctx):
    if value is None:
        return None
    if isinstance(value, str):
        return _gpu_names([value], ctx)
    names = want_list(value, "a GPU name or a list of names")
    if not names:
        raise Invalid("the list of GPU names must not be empty")
    return _gpu_names(names, ctx)


def parse_compute_capability(value: object) -> str:
    """``7.5``, ``"8.0"`` or ``[9, 0]``, rendered as the string ``"major.minor"``."""
    parts = None
    if isinstance(value, bool):
        parts = None
    elif isinstance(value, float):
        parts = repr(value).split(".")
    elif isinstance(value, str):
        parts = value.strip().split(".")
    elif isinstance(value, list):
        parts = value
    if parts is None or len(parts) != 2:
        raise Invalid(
            "invalid compute capability %s: write major.minor, e.g. 8.0 or [9, 0]" % show(value)
        )
    try:
        major, minor = (want_int(p) for p in parts)
    except Invalid as exc:
        raise Invalid("invalid compute capability %s: write major.minor, e.g. 8.0" % show(value)) from exc
    if major < 0 or minor < 0:
        raise Invalid("invalid compute capability %s: parts must not be negative" % show(value))
    return "%d.%d" % (major, minor)


def _cc_field(value, ctx):
    return None if value is None else parse_compute_capability(value)


def _gpu_result(spec):
    return {
        "vendor": spec.get("vendor"),
        "name": spec.get("name"),
        # A GPU spec without a count asks for at least one GPU.
        "count": spec.get("count") or at_least(1),
        "memory": spec.get("memory"),
        "total_memory": spec.get("total_memory"),
        "compute_capability": spec.get("compute_capability"),
    }


def parse_gpu(value: object, ctx: Ctx) -> Any:
    """The GPU spec: ``H100:8``, ``24GB``, ``A10G,A100``, ``amd:MI300X:8``, ``0`` or an object.

    String tokens are separated by ``:`` and classified in dstack's order: a vendor name; else a
    token starting with a letter is a list of names; else one containing a letter is a memory
    range; else it is the count range.
    """
    if isinstance(value, bool) or value is None or isinstance(value, float):
        raise Invalid(
            "expected a GPU spec such as H100:8, 24GB, A10G,A100 or 0..8, got %s" % describe(value)
        )
    if isinstance(value, int):
        value = str(check_magnitude(value))
    if isinstance(value, str):
        spec = {}
        for token in value.replace(" ", "").split(":"):
            if not token:
                raise Invalid("GPU spec contains an empty token: %s" % show(value))
            vendor = gpus.vendor_from_token(token)
            if vendor is not None:
                if "vendor" in spec:
                    raise Invalid("GPU spec vendor conflict: %s names two vendors" % show(value))
                spec["vendor"] = vendor
            elif token[0].isalpha():
                if "name" in spec:
                    raise Invalid(
                        "GPU spec name conflict: %s gives names twice; separate alternative "
                        "names with commas, e.g. A100,H100" % show(value)
                    )
                spec["name"] = _gpu_names(token.split(","), ctx, whole=value)
            elif any(c.isalpha() for c in token):
                if "memory" in spec:
                    raise Invalid("GPU spec memory conflict: %s gives memory twice" % show(value))
                spec["memory"] = memory_range(token, ctx)
            else:
                if "count" in spec:
                    raise Invalid("GPU spec count conflict: %s gives the count twice" % show(value))
                spec["count"] = count_range(token, ctx)
        return _gpu_result(spec)
    if isinstance(value, dict):
        data = want_mapping(value)
        fields = {
            "vendor": lambda v, c: None if v is None else _gpu_vendor(v),
            "name": _gpu_name_field,
            "count": count_range,
            "memory": lambda v, c: None if v is None else memory_range(v, c),
            "total_memory": lambda v, c: None if v is None else memory_range(v, c),
            "compute_capability": _cc_field,
        }
        parsed = parse_fields(data, ctx, fields)
        if any(v is INVALID for v in parsed.values()):
            return INVALID
        return _gpu_result(parsed)
    raise Invalid("expected a GPU spec such as H100:8 or 24GB, got %s" % describe(value))


def infer_gpu_vendor(gpu: dict[str, Any], default_image: bool) -> dict[str, Any]:
    """dstack's vendor inference, applied when the vendor is unset and GPUs may be requested.

    Names that all belong to one known vendor give that vendor; with no names, a run on the
    default (CUDA) image gets ``nvidia``. Mixed or unknown names leave the vendor unset.
    """
    if gpu["vendor"] is not None or gpu["count"]["max"] == 0:
        return gpu
    if gpu["name"]:
        vendor = gpus.infer_vendor(gpu["name"])
    else:
        vendor = "nvidia" if default_image else None
    if vendor is not None:
        gpu = dict(gpu, vendor=vendor)
    return gpu


# ---------------------------------------------------------------------------------------------
# Disk, shm, resources


def parse_disk(value: object, ctx: Ctx) -> Any:
    """``disk: 100GB..`` is shorthand for ``disk: {size: 100GB..}``."""
    if isinstance(value, dict):
        data = want_mapping(value)
        parsed = parse_object(
            data, ctx, {"size": memory_range}, ("size",), owner="disk", hint=", e.g. {size: 100GB..}"
        )
        return INVALID if parsed is INVALID else {"size": parsed["size"]}
    size = memory_range(value, ctx)
    return INVALID if size is INVALID else {"size": size}


def parse_shm_size(value: object, ctx: Ctx) -> int | float | None:
    if isinstance(value, str) and ".." in value:
        raise Invalid("shm_size is a single size, not a range: got %s" % show(value))
    return parse_memory(value)


# Each call builds new dicts: results never share objects with each other or with defaults.


def unconstrained_resources() -> dict[str, Any]:
    """What a fleet without ``resources`` accepts: any host at all (dstack PR #3776)."""
    return {
        "cpu": {"arch": None, "count": at_least(1)},
        "memory": at_least(0),
        "disk": None,
        "shm_size": None,
        "gpu": any_gpu(),
    }


def run_default_resources() -> dict[str, Any]:
    """dstack's defaults for a run: cpu 2.., memory 8GB.., disk 100GB.., gpu 0.. (any)."""
    return {
        "cpu": {"arch": None, "count": default_cpu_count()},
        "memory": at_least(8),
        "disk": {"size": at_least(100)},
        "shm_size": None,
        "gpu": any_gpu(),
    }


def any_gpu() -> dict[str, Any]:
    return _gpu_result({"count": at_least(0)})


def _required(parser, name):
    def parse(value, ctx):
        if value is None:
            raise Invalid("%s must not be empty; remove the key to use the default" % name)
        return parser(value, ctx)

    return parse


def _nullable(parser):
    def parse(value, ctx):
        return None if value is None else parser(value, ctx)

    return parse


RESOURCE_FIELDS = {
    "cpu": _required(parse_cpu, "cpu"),
    "memory": _required(memory_range, "memory"),
    "shm_size": _nullable(parse_shm_size),
    "gpu": _nullable(parse_gpu),
    "disk": _nullable(parse_disk),
}


def parse_resources(value: object, ctx: Ctx, default_image: bool = True) -> Any:
    """A resources block, with dstack's run defaults for every key left out.

    The result always has ``cpu``, ``memory``, ``disk``, ``shm_size`` and ``gpu``; an unset GPU
    spec becomes ``0..`` (any number of GPUs, including none).
    """
    if value is None:
        data = {}
    else:
        data = want_mapping(value, "a resources mapping (cpu, memory, gpu, disk, shm_size)")
    parsed = parse_fields(data, ctx, RESOURCE_FIELDS)
    if any(v is INVALID for v in parsed.values()):
        return INVALID
    out = run_default_resources()
    out.update(parsed)
    if out["gpu"] is None:
        out["gpu"] = any_gpu()
    elif "gpu" in parsed:
        out["gpu"] = infer_gpu_vendor(out["gpu"], default_image)
    return out


# ---------------------------------------------------------------------------------------------
# Durations

_DURATION_RE = re.compile(r"(?P<amount>[0-9]+) *(?P<unit>[smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
OFF = "off"


def parse_duration(value: object) -> int:
    """Seconds from an integer, ``90``, ``30s``, ``15m``, ``2h``, ``1d`` or ``1w``."""
    if isinstance(value, bool) or value is None:
        raise Invalid("expected a duration such as 30s, 15m, 2h or 1d, got %s" % describe(value))
    if isinstance(value, int):
        return check_magnitude(value)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return check_magnitude(int(value))
        raise Invalid("durations are whole numbers, got %s" % show(value))
    if isinstance(value, str):
        text = value
        if len(text) > MAX_NUMBER_TEXT:
            raise Invalid("cannot parse the duration %s: it is far too long" % show(value))
        if len(text) <= 40:
            try:
                return check_magnitude(int(text))
            except ValueError:
                pass
        match = _DURATION_RE.match(text)
        if match:
            amount = match.group("amount")
            if len(amount) > 20:
                raise Invalid("the duration %s is too large" % show(value))
            return check_magnitude(int(amount) * _UNITS[match.group("unit")])
        raise Invalid(
            "cannot parse the duration %s: write a whole number with one unit of s, m, h, d or w "
            "(e.g. 90m, not 1h30m or 1.5h)" % show(value)
        )
    raise Invalid("expected a duration such as 30s, 15m, 2h or 1d, got %s" % describe(value))


def offable_duration(default: int | str | None) -> Parser:
    """``max_duration`` / ``stop_duration``: a duration, ``off``/false, or true/unset (default)."""

    def parse(value, ctx):
        if value == OFF or value is False:
            return OFF
        if value is True or value is None:
            return default
        seconds = parse_duration(value)
        if seconds < 0:
            raise Invalid("duration cannot be negative, got %s" % show(value))
        return seconds

    return parse


def idle_duration(default: int | str | None) -> Parser:
    """``idle_duration``: like dstack, ``off``, false and any negative number mean off."""

    def parse(value, ctx):
        if value == OFF or value is False:
            return OFF
        if value is True or value is None:
            return default
        seconds = parse_duration(value)
        return OFF if seconds < 0 else seconds

    return parse


def required_duration(value: object, ctx: Ctx) -> int:
    seconds = parse_duration(value)
    if seconds < 0:
        raise Invalid("duration cannot be negative, got %s" % show(value))
    return seconds
