"""Local network volumes (backends/localpool.py, backends/local_volumes.py): the pool's records
under its lock, a volume attached to one node at a time, delete refused while in use, the spec
of ``backend: local``, and the node side's bind mount. The pool program runs for real on a
folder here; the Docker engine is a stand-in that runs it in-process (the real engine is in
tests/integration/test_task_volumes.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import (
    local,
    local_volumes,
    localpool,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import (
    Docker,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.files import module_source
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data, support
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import SpecError
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    nodeside,
    volumeside,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes import attach, listing
from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes import provision
from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes.mounts import VolumeError


# -- the pool program itself


def test_create_is_idempotent_and_records_who_and_when(tmp_path):
    made = localpool.serve("create", {"name": "data", "size": 10, "created": "T",
                                      "created_by": "me@here"}, root=str(tmp_path), now=100)
    assert made["changed"] is True
    assert made["volume"]["holder"] is None and made["volume"]["created_by"] == "me@here"
    assert (tmp_path / "data" / "data").is_dir()
    assert oct(os.stat(tmp_path / "data" / "data").st_mode & 0o777) == "0o777"
    again = localpool.serve("create", {"name": "data", "size": 99, "created": "U"},
                            root=str(tmp_path), now=101)
    assert again["changed"] is False and again["volume"]["size"] == 10
    assert [v["name"] for v in localpool.serve("list", {}, root=str(tmp_path))["volumes"]] == [
        "data"]


def test_a_holder_counts_only_while_its_container_runs_and_fresh_only_for_a_while(tmp_path):
    root = str(tmp_path)
    localpool.serve("create", {"name": "data", "created": "T"}, root=root, now=0)
    taken = localpool.serve("attach", {"name": "data", "generation": 0,
                                       "holder": {"id": "abc", "name": "n-0"}}, root=root, now=10)
    assert taken["previous"] is None and taken["volume"]["attached"] == "n-0"
    seen = localpool.serve("describe", {"name": "data", "live": ["abc"]}, root=root, now=20)
    assert seen["volume"]["attached"] == "n-0" and seen["volume"]["fresh"] is True
    later = localpool.serve("describe", {"name": "data", "live": ["n-0"]}, root=root,
                            now=10 + localpool.FRESH_S + 1)
    assert later["volume"]["attached"] == "n-0" and later["volume"]["fresh"] is False
    gone = localpool.serve("describe", {"name": "data", "live": ["other"]}, root=root, now=20)
    assert gone["volume"]["attached"] is None and gone["volume"]["fresh"] is False


def test_an_attach_judged_on_an_old_record_is_refused(tmp_path):
    root = str(tmp_path)
    localpool.serve("create", {"name": "data", "created": "T"}, root=root)
    localpool.serve("attach", {"name": "data", "generation": 0,
                               "holder": {"id": "a", "name": "n-0"}}, root=root)
    late = localpool.serve("attach", {"name": "data", "generation": 0,
                                      "holder": {"id": "b", "name": "n-1"}}, root=root)
    assert late == {"error": "volume data changed meanwhile (now attached to n-0): try again"}
    assert localpool.serve("delete", {"name": "data", "generation": 0}, root=root)["error"]
    assert (tmp_path / "records" / "data.json").exists()


def test_controllers_racing_for_one_volume_book_it_once(tmp_path):
    # Each attach opens the lock file itself, as separate controllers' containers do: flock
    # serializes them, and the generation lets exactly one of those that judged it free win.
    root = str(tmp_path)
    localpool.serve("create", {"name": "data", "created": "T"}, root=root)

    def take(num):
        return localpool.serve("attach", {"name": "data", "generation": 0,
                                          "holder": {"id": str(num), "name": "n-%d" % num}},
                               root=root)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(take, range(16)))
    winners = [a for a in answers if "error" not in a]
    assert len(winners) == 1
    record = json.loads((tmp_path / "records" / "data.json").read_text())
    assert record["generation"] == 1
    assert record["holder"] == winners[0]["volume"]["holder"]


def test_release_frees_only_for_the_holder_and_delete_removes_files(tmp_path):
    root = str(tmp_path)
    localpool.serve("create", {"name": "data", "created": "T"}, root=root)
    localpool.serve("attach", {"name": "data", "generation": 0,
                               "holder": {"id": "a", "name": "n-0"}}, root=root)
    assert localpool.serve("release", {"name": "data", "holder": "n-1"},
                           root=root)["changed"] is False
    freed = localpool.serve("release", {"name": "data", "holder": "n-0"}, root=root)
    assert freed["changed"] is True and freed["volume"]["holder"] is None
    gone = localpool.serve("delete", {"name": "data", "generation": 2}, root=root)
    assert gone["changed"] is True
    assert not (tmp_path / "data" / "data").exists()
    assert localpool.serve("delete", {"name": "data"}, root=root)["changed"] is False
    assert localpool.serve("describe", {"name": "data"}, root=root) == {"volume": None}


def test_bad_names_and_usage_are_answered_not_raised(tmp_path):
    assert localpool.serve("create", {"name": "../etc", "created": "T"},
                           root=str(tmp_path)) == {"error": "bad volume name '../etc'"}
    script = module_source(vars(localpool))
    proc = subprocess.run([sys.executable, "-", "nope", "{}"], input=script,
                          capture_output=True, check=False)
    assert json.loads(proc.stdout)["error"].startswith("usage: localpool.py")


# -- the controller side, against an engine stand-in


class Engine:
    """``docker`` as Pool uses it: ``run`` of the pool program (served in-process on a folder),
    ``ps``, ``exec`` into nodes (their running containers and mounts), ``volume``."""

    def __init__(self, root):
        self.root = str(root)
        self.now = 1000.0
        # running node name -> {container name: (running, "run id/submission", [mount sources])}
        self.nodes = {}
        self.broken = set()       # nodes whose docker does not answer
        self.execs = []
        self.pool_made = False

    def runner(self, argv, stdin=None):
        args = argv[1:]
        if args[:2] == ["volume", "inspect"]:
            return (0 if self.pool_made else 1), b"", b""
        if args[:2] == ["volume", "create"]:
            self.pool_made = True
            return 0, b"", b""
        if args[0] == "ps":
            lines = ["id-%s\t%s\tfleet-%s" % (n, n, n.split("-")[0]) for n in self.nodes]
            return 0, ("\n".join(lines) + "\n").encode(), b""
        if args[0] == "run":
            assert "--network" in args and args[args.index("--network") + 1] == "none"
            assert stdin == module_source(vars(localpool))
            op, payload = args[-2], json.loads(args[-1])
            answer = localpool.serve(op, payload, root=self.root, now=self.now)
            return 0, (json.dumps(answer) + "\n").encode(), b""
        if args[0] == "exec":
            node = args[1]
            self.execs.append(args[1:])
            if args[2] == "umount":
                return 0, b"", b""
            if node in self.broken:
                return 1, b"", b"Cannot connect to the Docker daemon"
            assert '"gpufleet.run-id"' in args[-1] and '"gpufleet.submission"' in args[-1]
            lines = ["/%s %s %s %s" % (name, "true" if up else "false", run, " ".join(srcs))
                     for name, (up, run, srcs) in self.nodes[node].items()]
            return 0, ("\n".join(lines) + "\n").encode(), b""
        raise AssertionError("unexpected docker %s" % args)


@pytest.fixture
def engine(tmp_path):
    return Engine(tmp_path / "pool")


def pool_of(engine):
    return local_volumes.Pool(Docker(binary="docker", runner=engine.runner), image="node-image")


def config(**extra):
    return parse_data(dict({"type": "volume", "name": "data", "backend": "local",
                            "size": "5GB"}, **extra), "vol.yml", "volume")[0]


def test_apply_makes_the_pool_and_a_record_once(engine):
    pool = pool_of(engine)
    record, changed = provision.apply(config(), "data", client=pool, check_mode=True)
    assert changed is True and record["status"] == "submitted"
    assert not engine.pool_made   # check mode: nothing made, not even the pool
    record, changed = provision.apply(config(), "data", client=pool)
    assert changed is True and engine.pool_made
    assert dict((k, record[k]) for k in ("name", "backend", "region", "size", "status",
                                         "attached_to")) == {
        "name": "data", "backend": "local", "region": "local", "size": 5, "status": "active",
        "attached_to": []}
    assert record["created_by"] == local_volumes.who() and "@" in record["created_by"]
    assert provision.apply(config(), "data", client=pool)[1] is False
    assert provision.describe(config(), "data", client=pool)["status"] == "active"


RUN = {"id": "r1", "submission": 0}
MOUNTED = "/mnt/disks/dstack-volumes/data"


def test_a_volume_moves_only_from_a_node_where_nothing_uses_it(engine):
    pool = pool_of(engine)
    provision.apply(config(), "data", client=pool)
    engine.nodes = {"a-0": {}, "a-1": {}}
    assert pool.attach_volume("data", "local", pool.volume("data"), "a-0", run=RUN) == [
        "/var/lib/gpufleet/volumes/data/data"]
    # Just attached, its run has no container on a-0 yet: the job is starting, a-1 waits.
    with pytest.raises(local_volumes.BackendError,
                       match=r"volume data is attached to node a-0 less than 60 s ago, for a "
                             r"run starting there; a volume is attached to one node at a time"):
        pool.attach_volume("data", "local", pool.volume("data"), "a-1", run=RUN)
    # Its container runs and binds it: in use, however long ago it was attached.
    engine.nodes["a-0"] = {"job-r1-0": (True, "r1/0", [MOUNTED, "/srv"])}
    for _attempt in range(2):
        with pytest.raises(local_volumes.BackendError,
                           match=r"volume data is in use on node a-0 by container job-r1-0"):
            pool.attach_volume("data", "local", pool.volume("data"), "a-1", run=RUN)
        engine.now += localpool.FRESH_S + 1
    # The same node takes it again at once (the next run there).
    pool.attach_volume("data", "local", pool.volume("data"), "a-0", run={"id": "r2"})
    assert pool.volume("data")["attached_for"] == {"id": "r2", "submission": "0"}
    # The run ended (its container exited) within the window: the volume is free to move.
    engine.nodes["a-0"] = {"job-r1-0": (False, "r1/0", [MOUNTED]),
                           "job-r2-0": (False, "r2/0", [MOUNTED])}
    pool.attach_volume("data", "local", pool.volume("data"), "a-1", run=RUN)
    assert ["a-0", "umount", MOUNTED] in engine.execs
    assert pool.volume("data")["attached"] == "a-1"


def test_a_stopped_holder_holds_nothing_and_a_mute_one_holds_it(engine):
    pool = pool_of(engine)
    provision.apply(config(), "data", client=pool)
    engine.nodes = {"a-0": {}, "a-1": {}}
    pool.attach_volume("data", "local", pool.volume("data"), "a-0")
    engine.now += localpool.FRESH_S + 1
    engine.broken.add("a-0")
    with pytest.raises(local_volumes.BackendError, match=r"node a-0 could not list its "
                                                         r"containers .*counts as in use"):
        pool.attach_volume("data", "local", pool.volume("data"), "a-1")
    del engine.nodes["a-0"]   # the node stopped or went: the volume is free
    pool.attach_volume("data", "local", pool.volume("data"), "a-1")
    with pytest.raises(local_volumes.BackendError, match=r"node b-0 is not running"):
        pool.attach_volume("data", "local", pool.volume("data"), "b-0")


def test_delete_is_refused_while_in_use_and_works_after(engine):
    pool = pool_of(engine)
    provision.apply(config(), "data", client=pool)
    engine.nodes = {"a-0": {"job-x-0": (True, "x/0", [MOUNTED])}}
    pool.attach_volume("data", "local", pool.volume("data"), "a-0", run={"id": "x"})
    with pytest.raises(VolumeError, match=r"volume data is in use on node a-0 by container "
                                          r"job-x-0: stop the run that uses it"):
        provision.delete(config(), "data", client=pool)
    assert pool.volume("data") is not None
    engine.nodes["a-0"] = {"job-x-0": (False, "x/0", [MOUNTED])}
    record, changed = provision.delete(config(), "data", client=pool)
    assert changed is True and record["status"] == "terminated"
    assert pool.volume("data") is None
    assert provision.delete(config(), "data", client=pool)[1] is False


def test_the_listing_shows_local_volumes_and_their_fleet(engine):
    pool = pool_of(engine)
    assert listing.list_volumes({}, clients={"local": pool}) == []   # no pool: none, none made
    assert engine.pool_made is False
    provision.apply(config(), "data", client=pool)
    engine.nodes = {"a-0": {}}
    pool.attach_volume("data", "local", pool.volume("data"), "a-0")
    [record] = listing.list_volumes({}, clients={"local": pool})
    assert record["attached_to"] == ["a-0"] and record["attached_fleets"] == ["fleet-a"]


def test_no_engine_means_no_local_volumes_rather_than_a_failure():
    class Mute(local_volumes.Pool):
        def all_volumes(self, regions=None):
            raise local_volumes.DockerError("the Docker engine is not running")

    assert listing.local_records(Mute(None)) == []


def test_attaching_a_local_volume_asks_the_node_to_bind_it_from_the_pool(engine):
    pool = pool_of(engine)
    provision.apply(config(), "data", client=pool)
    engine.nodes = {"f-0": {}}

    class Node:
        instance = {"backend": "local", "region": "local", "container": "f-0"}
        calls = []

        def call(self, op, payload):
            self.calls.append((op, payload))
            return {"mounted": True}

    task = parse_data({"type": "task", "commands": ["true"], "volumes": ["data:/data"]})[0]
    run = {"name": "r"}
    where = attach.locate(task, run, {"local": pool}, {"local": ["local"]})
    assert where == {"backend": "local", "region": "local", "zone": None}
    assert attach.steer(task, where)["backends"] == ["local"]
    node = Node()
    attach.attach_and_mount(task, {"jobs": [{"host": "f-0", "job_num": 0}]}, run,
                            {"f-0": node}, {"local": pool})
    assert node.calls == [("mount_volume", {"name": "data", "wait": attach.MOUNT_WAIT,
                                            "devices": ["/var/lib/gpufleet/volumes/data/data"],
                                            "pool": "/var/lib/gpufleet/volumes"})]
    assert pool.volume("data")["attached_for"] == {"id": "", "submission": "0"}


# -- spec, nodes, node side


def test_the_spec_of_a_local_volume():
    assert config()["region"] == "local"
    assert support.volume_backend_refusal("local") is None
    for extra, message in (
            ({"region": "eu"}, r"region: .*only region is local; got 'eu'"),
            ({"volume_id": "v-1"}, r"volume_id: a local volume cannot register an existing "
                                   r"volume \(got 'v-1'\)"),
            ({"availability_zone": "z"}, r"availability_zone: a local volume has no "
                                         r"availability zone")):
        with pytest.raises(SpecError, match=message):
            config(**extra)
    with pytest.raises(local_volumes.BackendError, match=r"cannot be registered"):
        local_volumes.Pool(None).register_volume("data", "local", "v")


def test_every_node_mounts_the_pool():
    seen = []

    def runner(argv, stdin=None):
        seen.append(argv)
        return 0, b"id\n", b""

    local._run_node(Docker(binary="docker", runner=runner), "f", 0, "any", "img", "key", "T",
                    ())
    argv = seen[0]
    assert "type=volume,source=gpufleet-volumes,target=/var/lib/gpufleet/volumes" in argv
    assert local_volumes.node_folder("x").startswith(local.NODE_POOL_DIR + "/")


def test_the_labels_read_on_nodes_are_the_ones_job_containers_carry():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import container

    assert local_volumes.RUN_ID_LABEL == container.RUN_ID_LABEL
    assert local_volumes.SUBMISSION_LABEL == container.SUBMISSION_LABEL
    assert local_volumes.MOUNT_ROOT == volumeside.NETWORK_VOLUMES_ROOT


def test_a_node_without_the_pool_says_to_recreate_the_fleet(tmp_path):
    (tmp_path / "pool").mkdir()
    with pytest.raises(nodeside.Failure, match=r"volume data: this node has no local volume "
                                               r"pool at .*recreate the fleet"):
        volumeside.op_mount_volume({"name": "data", "devices": [str(tmp_path / "pool/data/data")],
                                    "pool": str(tmp_path / "pool"), "root": str(tmp_path / "m")})


def test_the_node_binds_the_folder_once_and_unmounts_it(tmp_path):
    # Real bind mounts, as on a node: the test tiers run as root (make engine needs it too).
    pool = tmp_path / "pool"
    (pool / "data" / "data").mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(pool), str(pool)], check=True)
    payload = {"name": "data", "devices": [str(pool / "data" / "data")], "pool": str(pool),
               "root": str(tmp_path / "m")}
    try:
        assert volumeside.op_mount_volume(payload)["mounted"] is True
        (tmp_path / "m" / "data" / "f").write_text("x")
        assert (pool / "data" / "data" / "f").read_text() == "x"
        assert volumeside.op_mount_volume(payload)["mounted"] is False
        assert volumeside.op_unmount_volume(payload) == {"unmounted": True}
    finally:
        volumeside.op_unmount_volume(payload)
        subprocess.run(["umount", str(pool)], check=False)


def test_volume_delete_by_name_deletes_as_the_volume_file_would():
    from gpufleet.api import volume_config

    assert volume_config({"name": "data", "backend": "local", "region": "local", "size": 5}) == {
        "type": "volume", "name": "data", "backend": "local", "size": "5GB"}
    assert volume_config({"name": "dd", "backend": "aws", "region": "us-east-1",
                          "availability_zone": "us-east-1a", "size": 10, "external": True,
                          "volume_id": "vol-1"}) == {
        "type": "volume", "name": "dd", "backend": "aws", "region": "us-east-1",
        "availability_zone": "us-east-1a", "volume_id": "vol-1"}
    for record in ({"name": "data", "backend": "local", "region": "local", "size": 5},
                   {"name": "dd", "backend": "gcp", "region": "us-central1", "size": 10,
                    "availability_zone": "us-central1-a", "volume_id": "dd", "external": False}):
        parse_data(volume_config(record), "x", "volume")   # a valid volume file


def test_delete_of_a_local_volume_file_deletes_it_and_says_so_when_it_is_gone(tmp_path,
                                                                              monkeypatch):
    import io

    from gpufleet import api, cli

    path = tmp_path / "vol.dstack.yml"
    path.write_text("type: volume\nname: data\nbackend: local\nsize: 1GB\n")
    there = {"name": "data", "backend": "local", "region": "local", "size": 1,
             "volume_id": None, "status": "terminated", "created": "2026-01-01T00:00:00Z"}
    deleted = []
    monkeypatch.setattr(api, "plan", lambda _path, delete=False: dict(there))
    monkeypatch.setattr(api, "delete", lambda p: deleted.append(p) or dict(there))
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["delete", "-y", "-f", str(path)], out=out, err=err) == 0
    assert deleted == [str(path)] and "Volume data deleted: local local 1GB" in out.getvalue()
    # Gone already (no creation time): nothing to delete, nothing asked of the playbook.
    there["created"] = None
    out = io.StringIO()
    assert cli.main(["delete", "-y", "-f", str(path)], out=out, err=err) == 0
    assert out.getvalue() == "Volume data: nothing to delete.\n" and len(deleted) == 1
