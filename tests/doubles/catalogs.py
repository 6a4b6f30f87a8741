"""Small offer catalogs for tests (the format of plugins/module_utils/offers/catalog.py)."""

from __future__ import annotations


def machine(name, cpus, memory_mib, gpu=None, region="us-east-1", zones=None, price=1.0,
            spot_price=None, arch="x86"):
    """One instance type offered in one region; ``gpu`` is ``(name, memory_mib, count)``."""
    return {"name": name, "cpus": cpus, "memory_mib": memory_mib, "arch": arch,
            "gpu": None if gpu is None else {"vendor": "nvidia", "name": gpu[0],
                                             "memory_mib": gpu[1], "count": gpu[2]},
            "offers": [{"region": region, "zones": list(zones or [region + "a"]),
                        "price": price, "spot_price": spot_price}]}


def catalog(backend, *machines):
    return {"backend": backend, "as_of": "2026-01-02", "currency": "USD", "source": "test",
            "notes": [], "instance_types": list(machines)}
