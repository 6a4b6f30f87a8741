"""Cloud offers: catalogs, matching a fleet or task against them, and dstack's offers table."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.fleet_table import offer_table
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers.select import (
    OfferError,
    disk_gb,
    no_offers_message,
    select,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

from ..configs import task


def entry(name, cpus, memory_gib, gpu=None, offers=None, arch="x86"):
    return {"name": name, "cpus": cpus, "memory_mib": memory_gib * 1024, "arch": arch,
            "gpu": gpu, "offers": offers}


def gpu(name, memory_gib, count, vendor="nvidia"):
    return {"vendor": vendor, "name": name, "memory_mib": memory_gib * 1024, "count": count}


def where(region, price, spot_price=None, zones=None):
    return {"region": region, "zones": zones or [region + "a"], "price": price,
            "spot_price": spot_price}


AWS = {
    "backend": "aws", "as_of": "2026-11-01", "currency": "USD", "source": "test", "notes": [],
    "instance_types": [
        entry("c5.xlarge", 4, 8, None, [where("us-east-1", 0.17, 0.07)]),
        entry("g4dn.xlarge", 4, 16, gpu("T4", 16, 1),
              [where("eu-west-1", 0.587, None),
               where("us-east-1", 0.526, 0.2, ["us-east-1a", "us-east-1b"])]),
        entry("g5.12xlarge", 48, 192, gpu("A10G", 24, 4), [where("us-east-1", 5.672, 2.1)]),
        entry("g5g.xlarge", 4, 8, gpu("T4G", 16, 1), [where("us-east-1", 0.42, 0.15)],
              arch="arm"),
        entry("p4de.24xlarge", 96, 1152, gpu("A100", 80, 8), [where("us-east-1", 40.97)]),
        entry("p5.48xlarge", 192, 2048, gpu("H100", 80, 8),
              [where("us-east-1", 55.04, 21.5, ["us-east-1a", "us-east-1c"]),
               where("us-west-2", 55.04, 19.9)]),
    ],
}
GCP = {
    "backend": "gcp", "as_of": "2026-11-01", "currency": "USD", "source": "test", "notes": [],
    "instance_types": [
        entry("a3-highgpu-8g", 208, 1872, gpu("H100", 80, 8),
              [where("us-central1", 88.25, 25.0, ["us-central1-a"])]),
        entry("g2-standard-4", 4, 16, gpu("L4", 24, 1), [where("us-central1", 0.71, 0.28)]),
    ],
}
CATALOGS = {"aws": AWS, "gcp": GCP}


def fleet(**fields):
    data = {"type": "fleet", "name": "train", "nodes": 2}
    data.update(fields)
    return parse_data(data)[0]


def picked(config, catalogs=None, reservation=None):
    found = select(config, catalogs or CATALOGS, reservation)
    return [(o["backend"], o["instance_type"], o["region"], o["spot"], o["price"])
            for o in found["offers"]]


# ---------------------------------------------------------------------------------------------
# Catalogs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", catalog.BACKENDS)
def test_shipped_catalogs_are_well_formed_and_sorted(backend):
    data = catalog.shipped(backend)
    assert data["backend"] == backend
    names = [e["name"] for e in data["instance_types"]]
    assert names == sorted(names)
    for item in data["instance_types"]:
        assert [o["region"] for o in item["offers"]] == sorted(o["region"] for o in item["offers"])
        for offer in item["offers"]:
            assert offer["spot_price"] is None or offer["spot_price"] < offer["price"], item


def test_catalog_check_names_the_file_and_field():
    bad = copy.deepcopy(AWS)
    bad["instance_types"][1]["gpu"]["count"] = 0
    with pytest.raises(catalog.CatalogError, match=r"^f\.json: instance_types\[1\]\.gpu\.count: "
                                                   r"must be a positive whole number, got 0"):
        catalog.check(bad, "aws", "f.json")
    bad = copy.deepcopy(AWS)
    del bad["instance_types"][0]["offers"][0]["zones"]
    with pytest.raises(catalog.CatalogError, match=r"offers\[0\]: has missing keys zones"):
        catalog.check(bad, "aws", "f.json")
    bad = copy.deepcopy(AWS)
    bad["instance_types"][3]["arch"] = "aarch64"
    with pytest.raises(catalog.CatalogError,
                       match=r"instance_types\[3\]\.arch: must be x86 or arm"):
        catalog.check(bad, "aws", "f.json")
    bad = copy.deepcopy(AWS)
    bad["instance_types"].append(copy.deepcopy(bad["instance_types"][0]))
    with pytest.raises(catalog.CatalogError, match="repeats c5.xlarge"):
        catalog.check(bad, "aws", "f.json")
    with pytest.raises(catalog.CatalogError,
                       match="backend: is 'aws'; this file must hold the gcp"):
        catalog.check(AWS, "gcp", "f.json")


def test_a_refreshed_catalog_in_the_catalog_dir_replaces_the_shipped_one(tmp_path):
    data, source = catalog.load("aws", str(tmp_path))
    assert source == "shipped" and data == catalog.shipped("aws")
    catalog.write(AWS, str(tmp_path / "aws.json"))
    data, source = catalog.load("aws", str(tmp_path))
    assert source == str(tmp_path / "aws.json") and data == AWS
    (tmp_path / "gcp.json").write_text("{not json")
    with pytest.raises(catalog.CatalogError, match="gcp.json: cannot be read as JSON"):
        catalog.load("gcp", str(tmp_path))


def test_a_catalog_ships_as_a_python_module_that_reads_back_the_same(tmp_path):
    text = catalog.module_source(AWS)
    namespace = {}
    exec(compile(text, "_catalog_aws.py", "exec"), namespace)  # noqa: S102 - our own output
    assert namespace["CATALOG"] == AWS
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "as of 2026-11-01" in text


# ---------------------------------------------------------------------------------------------
# Selecting offers
# ---------------------------------------------------------------------------------------------


def test_an_unconstrained_fleet_takes_every_on_demand_offer_cheapest_first():
    offers = picked(fleet())
    assert offers[0] == ("aws", "c5.xlarge", "us-east-1", False, 0.17)
    assert [o[4] for o in offers] == sorted(o[4] for o in offers)
    assert not any(o[3] for o in offers)   # spot_policy defaults to on-demand
    assert len(offers) == 10


def test_gpu_spec_picks_by_name_count_and_memory():
    assert [o[1] for o in picked(fleet(resources={"gpu": "H100:8"}))] == \
        ["p5.48xlarge", "p5.48xlarge", "a3-highgpu-8g"]
    assert [o[1] for o in picked(fleet(resources={"gpu": "80GB:8"}))] == \
        ["p4de.24xlarge", "p5.48xlarge", "p5.48xlarge", "a3-highgpu-8g"]
    assert [o[1] for o in picked(fleet(resources={"gpu": "A10G,L4"}))] == \
        ["g2-standard-4", "g5.12xlarge"]
    assert [o[1] for o in picked(fleet(resources={"gpu": "24GB:4"}))] == ["g5.12xlarge"]
    # memory: 192GB is exact, as in dstack.
    assert [o[1] for o in picked(fleet(resources={"memory": "192GB"}))] == ["g5.12xlarge"]
    assert [o[1] for o in picked(fleet(resources={"cpu": "arm:2.."}))] == ["g5g.xlarge"]


def test_profile_fields_narrow_offers_without_regard_to_case():
    config = fleet(resources={"gpu": "H100:8"}, backends=["aws"], regions=["US-WEST-2"])
    assert picked(config) == [("aws", "p5.48xlarge", "us-west-2", False, 55.04)]
    config = fleet(instance_types=["G4DN.XLARGE"])
    assert [(o[1], o[2]) for o in picked(config)] == \
        [("g4dn.xlarge", "us-east-1"), ("g4dn.xlarge", "eu-west-1")]
    found = select(fleet(availability_zones=["us-east-1c"]), CATALOGS)
    assert [(o["instance_type"], o["zones"]) for o in found["offers"]] == \
        [("p5.48xlarge", ["us-east-1c"])]


def test_spot_policy_and_max_price():
    spot = picked(fleet(resources={"gpu": "H100:8"}, spot_policy="spot"))
    assert spot == [("aws", "p5.48xlarge", "us-west-2", True, 19.9),
                    ("aws", "p5.48xlarge", "us-east-1", True, 21.5),
                    ("gcp", "a3-highgpu-8g", "us-central1", True, 25.0)]
    both = picked(fleet(resources={"gpu": "T4"}, spot_policy="auto"))
    assert both == [("aws", "g4dn.xlarge", "us-east-1", True, 0.2),
                    ("aws", "g4dn.xlarge", "us-east-1", False, 0.526),
                    ("aws", "g4dn.xlarge", "eu-west-1", False, 0.587)]
    # max_price is inclusive.
    assert [o[4] for o in picked(fleet(resources={"gpu": "T4"}, max_price=0.526))] == [0.526]
    found = select(fleet(resources={"gpu": "T4"}, spot_policy="spot"), CATALOGS)
    assert found["rejected"] == {"resources": 7, "spot_policy": 1}


def test_a_reservation_is_on_demand_and_pins_type_and_zone_when_known():
    config = fleet(resources={"gpu": "H100:8"}, spot_policy="auto", reservation="cr-0abc")
    offers = select(config, CATALOGS)["offers"]
    assert all(not o["spot"] and o["reservation"] == "cr-0abc" for o in offers)
    known = {"backend": "aws", "instance_type": "p5.48xlarge", "region": "us-east-1",
             "zone": "us-east-1c"}
    found = select(config, CATALOGS, known)
    assert [(o["region"], o["zones"]) for o in found["offers"]] == [("us-east-1", ["us-east-1c"])]
    assert found["rejected"]["reservation"] == 2   # us-west-2, and GCP


def test_disk_sizes_the_boot_disk_within_what_the_backend_makes():
    assert disk_gb(fleet(), "aws") == 100
    assert disk_gb(fleet(resources={"disk": "500GB.."}), "aws") == 500
    assert disk_gb(fleet(resources={"disk": "..50GB"}), "aws") == 50
    assert disk_gb(fleet(resources={"disk": "20TB.."}), "aws") is None
    assert disk_gb(fleet(resources={"disk": "20TB.."}), "gcp") == 20480
    found = select(fleet(resources={"disk": "20TB.."}), CATALOGS)
    assert {o["backend"] for o in found["offers"]} == {"gcp"}
    assert found["rejected"]["disk"] == len(AWS["instance_types"])
    assert found["offers"][0]["resources"]["disk"] == {"available_mib": 20480 * 1024}


def test_a_task_uses_the_run_defaults():
    # cpu 2.., memory 8GB.., disk 100GB..: every instance type here has them; the default
    # image is x86, so the Graviton type is left out, unless the task's image may be arm.
    assert len(picked(task())) == 9
    assert len(picked(task(image="ubuntu"))) == 10
    assert picked(task(resources={"gpu": "L4"}, backends=["gcp"])) == \
        [("gcp", "g2-standard-4", "us-central1", False, 0.71)]


def test_backends_without_a_catalog_are_refused_with_what_has_one():
    with pytest.raises(OfferError, match=r"backends local have no offer catalog \(catalogs: "
                                         r"aws, gcp\)"):
        select(fleet(backends=["local"]), CATALOGS)
    assert {o[0] for o in picked(fleet(backends=["local", "gcp"]))} == {"gcp"}


def test_no_offers_says_what_ruled_the_catalog_out():
    found = select(fleet(resources={"gpu": "H100:8"}, max_price=10), CATALOGS)
    assert found["offers"] == []
    message = no_offers_message("train", found["rejected"])
    assert message.startswith("train: no offers; of the catalog's instance types and regions, "
                              "6 do not have the resources, 3 cost more than max_price.")
    assert "Relax resources" in message


# ---------------------------------------------------------------------------------------------
# The offers table
# ---------------------------------------------------------------------------------------------


def test_offer_table_shows_the_first_offers_and_the_highest_price():
    offers = select(fleet(resources={"gpu": "T4"}, spot_policy="auto"), CATALOGS)["offers"]
    lines = offer_table(offers, limit=2)
    assert lines[0].split() == ["#", "BACKEND", "REGION", "INSTANCE", "RESOURCES", "SPOT", "PRICE"]
    assert lines[1].split() == ["1", "aws", "us-east-1", "g4dn.xlarge", "cpu=4", "mem=16GB",
                                "disk=100GB", "gpu=T4:16GB:1", "yes", "$0.2"]
    assert lines[2].split()[-2:] == ["no", "$0.526"]
    assert lines[3].strip() == "..."
    assert lines[-1] == "Shown 2 of 3 offers, $0.587 max"
    assert offer_table([], limit=3) == []
    assert offer_table(offers, limit=None)[-1] == "Shown 3 of 3 offers, $0.587 max"


# ---------------------------------------------------------------------------------------------
# The shipped catalogs against the grammar's examples (docs/reference/dstack-files.md#examples)
# ---------------------------------------------------------------------------------------------

SHIPPED = dict((b, catalog.shipped(b)) for b in catalog.BACKENDS)


def shipped_offers(resources):
    return select(fleet(resources=resources, spot_policy="auto"), SHIPPED)["offers"]


def gpus(offer):
    return offer["resources"]["gpu"]


def gib(mib):
    return mib / 1024


@pytest.mark.parametrize("resources, holds", [
    ({"gpu": "H100:8"}, lambda o: gpus(o)["name"] == "H100" and gpus(o)["count"] == 8),
    ({"gpu": "8"}, lambda o: gpus(o)["count"] == 8),
    ({"gpu": "24GB"}, lambda o: gib(gpus(o)["memory_mib"]) == 24 and gpus(o)["count"] >= 1),
    ({"gpu": "40GB..80GB:1..8"},
     lambda o: 40 <= gib(gpus(o)["memory_mib"]) <= 80 and 1 <= gpus(o)["count"] <= 8),
    ({"gpu": "A100:80GB:8"}, lambda o: (gpus(o)["name"], gib(gpus(o)["memory_mib"]),
                                        gpus(o)["count"]) == ("A100", 80, 8)),
    ({"gpu": "nvidia:1..8"}, lambda o: gpus(o)["vendor"] == "nvidia" and gpus(o)["count"] <= 8),
    ({"gpu": "A10G,A100"}, lambda o: gpus(o)["name"] in ("A10G", "A100")),
    ({"gpu": "8:b200"}, lambda o: gpus(o)["name"] == "B200" and gpus(o)["count"] == 8),
    ({"gpu": "16GB..32"}, lambda o: 16 <= gib(gpus(o)["memory_mib"]) <= 32),
    ({"gpu": "..80GB"}, lambda o: gib(gpus(o)["memory_mib"]) <= 80),
    ({"gpu": {"name": ["H100"], "count": {"min": 2}, "total_memory": "160GB.."}},
     lambda o: gpus(o)["name"] == "H100" and gpus(o)["count"] >= 2),
    ({"memory": "200GB.."}, lambda o: gib(o["resources"]["memory"]["mib"]) >= 200),
    ({"memory": "..1 TB"}, lambda o: gib(o["resources"]["memory"]["mib"]) <= 1024),
    ({"cpu": "16.."}, lambda o: o["resources"]["cpus"] >= 16),
    ({"cpu": "2..:ARM"}, lambda o: o["resources"]["arch"] == "aarch64"),
    ({"cpu": "x86:2"}, lambda o: o["resources"]["cpus"] == 2),
    ({"disk": "500GB"}, lambda o: o["resources"]["disk"]["available_mib"] == 500 * 1024),
])
def test_shipped_offers_satisfy_the_grammar_examples(resources, holds):
    offers = shipped_offers(resources)
    every = select(fleet(spot_policy="auto"), SHIPPED)["offers"]
    assert all(holds(o) for o in offers), [o["instance_type"] for o in offers if not holds(o)]
    # Nothing the spec allows is left out: every offer of the unconstrained fleet that
    # satisfies the property (and the disk the spec sizes) is among the matches.
    keys = set((o["backend"], o["instance_type"], gpus(o)["count"], o["region"], o["spot"])
               for o in offers)
    if "disk" not in resources:
        missed = [o["instance_type"] for o in every if holds(o)
                  and (o["backend"], o["instance_type"], gpus(o)["count"], o["region"],
                       o["spot"]) not in keys]
        assert not missed, missed


@pytest.mark.parametrize("resources, expected", [
    ({"gpu": "A100:80GB:8"}, {"p4de.24xlarge", "a2-ultragpu-8g"}),
    ({"gpu": "8:b200"}, {"p6-b200.48xlarge", "a4-highgpu-8g"}),
    ({"gpu": "H200:8"}, {"p5e.48xlarge", "p5en.48xlarge", "a3-ultragpu-8g"}),
    ({"gpu": "MI300X:AMD"}, set()),
    ({"gpu": "0"}, set()),                   # the catalogs hold GPU types only
    ({"gpu": "A10,A10G:2"}, set()),          # g5 comes with 1, 4 or 8 A10Gs
    ({"cpu": "2..:ARM", "gpu": "T4G"}, {"g5g.xlarge", "g5g.2xlarge", "g5g.4xlarge",
                                        "g5g.8xlarge", "g5g.16xlarge", "g5g.metal"}),
])
def test_shipped_offers_by_instance_type(resources, expected):
    assert set(o["instance_type"] for o in shipped_offers(resources)) == expected


# ---------------------------------------------------------------------------------------------
# The backend settings' regions: offers only where a fleet applied from the file launches
# ---------------------------------------------------------------------------------------------


def offer_module(tmp_path, config, settings_text):
    """``offer_info`` run in-process with ``settings_text`` as the state dir's backends.yml
    and this file's catalogs; returns its result."""
    from ansible_collections.gpufleet.cluster.plugins.modules import offer_info

    from ..plugins.modules import module_runner

    state_dir = tmp_path / "state"
    for backend, data in CATALOGS.items():
        catalog.write(data, str(state_dir / "catalog" / ("%s.json" % backend)))
    (state_dir / "backends.yml").write_text(settings_text)
    code, result = module_runner.run_module(
        offer_info.main, {"config": config, "state_dir": str(state_dir), "limit": 10})
    assert code == 0, result
    return result


def test_offer_takes_the_regions_of_the_backend_settings_as_fleet_apply_does(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import cloud

    config = {"type": "fleet", "name": "h100", "nodes": 1, "backends": ["aws"],
              "resources": {"gpu": "H100:8"}, "spot_policy": "auto"}
    result = offer_module(tmp_path, config, "aws:\n  regions: [us-west-2]\n")
    assert [(o["instance_type"], o["region"], o["spot"]) for o in result["offers"]] == [
        ("p5.48xlarge", "us-west-2", True), ("p5.48xlarge", "us-west-2", False)]
    assert result["rejected"]["region"] == 1   # p5 in us-east-1
    # The regions fleet apply launches in (fleets.cloud.regions) are the ones offered.
    settings = {"aws": {"regions": ["us-west-2"]}}
    assert cloud.regions(parse_data(config)[0], settings, "aws",
                         str(tmp_path / "state" / "catalog")) == ["us-west-2"]


def test_offer_says_why_a_backend_has_no_region_left(tmp_path):
    config = {"type": "fleet", "name": "h100", "nodes": 1, "backends": ["aws"],
              "regions": ["us-east-1"], "resources": {"gpu": "H100:8"}}
    result = offer_module(tmp_path, config, "aws:\n  regions: [us-west-2]\n")
    assert result["offers"] == []
    assert result["msg"].startswith("h100: no offers; of the catalog's instance types and "
                                    "regions, ")
    assert result["msg"].endswith("h100: regions us-east-1 are not among the aws backend's "
                                  "regions (us-west-2)")


def test_a_launch_counts_offers_outside_the_settings_regions_as_region(tmp_path):
    """Fleet apply's offers (fleets.cloud) are select's with the same region limits."""
    found = select(fleet(backends=["aws"], resources={"gpu": "H100:8"}), CATALOGS, None,
                   {"aws": ["us-west-2"]})
    assert [(o["region"]) for o in found["offers"]] == ["us-west-2"]
    assert found["rejected"] == {"region": 1, "resources": 5}


def test_a_runs_plan_to_grow_a_cloud_fleet_looks_in_the_settings_regions(tmp_path):
    """What a run's plan says a new instance of a cloud fleet costs comes from the regions the
    fleet would launch in. (It used to find none at all: the catalog went to select as
    catalog.load's (catalog, source) pair, so an empty cloud fleet never grew for a run.)"""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import runs

    state_dir = tmp_path / "state"
    catalog.write(AWS, str(state_dir / "catalog" / "aws.json"))
    runner = runs.Runner(task(), [], root=str(state_dir))
    fleet_record = {"name": "g", "backends": ["aws"], "instances": [],
                    "resources": parse_data({"type": "fleet", "nodes": 1,
                                             "resources": {"gpu": "H100:8"}})[0]["resources"],
                    "spot_policy": "on-demand"}
    assert runner.placing.offer_for(fleet_record)["region"] == "us-east-1"   # the cheapest there
    (state_dir / "backends.yml").write_text("aws:\n  regions: [us-west-2]\n")
    assert runner.placing.offer_for(fleet_record)["region"] == "us-west-2"


def test_offer_info_names_an_unnamed_fleet_file_as_applying_it_does(tmp_path):
    """The fleet in offer_info's messages has the name spec.naming gives its file
    (``my-lab-v2``), not the file name cut at its first dot (``My``)."""
    from ansible_collections.gpufleet.cluster.plugins.modules import offer_info

    from ..plugins.modules import module_runner

    path = tmp_path / "My.Lab.v2.dstack.yml"
    path.write_text("type: fleet\nssh_config:\n  user: ubuntu\n"
                    "  identity_file: ~/.ssh/id_ed25519\n  hosts: [10.0.0.1]\n")
    code, result = module_runner.run_module(
        offer_info.main, {"path": str(path), "state_dir": str(tmp_path / "state")})
    assert code == 1
    assert result["msg"].startswith("fleet my-lab-v2 is an SSH fleet"), result["msg"]
