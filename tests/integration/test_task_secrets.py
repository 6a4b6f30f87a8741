"""``gpufleet secret set`` and a task that uses it, end to end on the shared 3-node local fleet:
the value reaches the job's environment and shows up nowhere else."""

from __future__ import annotations

import hashlib
import json
import os
import uuid

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local

from gpufleet import cli
from gpufleet.runner import run_playbook

from .task_world import CPU, FLEET, SUFFIX, logs, task_file


def test_a_stored_secret_reaches_the_job_and_nothing_else(world, capsys, monkeypatch, tmp_path):
    value = "gf-secret-" + uuid.uuid4().hex
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(world["vault_password"]))
    state = os.environ["GPUFLEET_STATE_DIR"]
    assert cli.main(["secret", "set", "HF_TOKEN", value]) == 0
    name = "secret-" + SUFFIX
    path = task_file(world, name, (
        "type: task\nname: %s\nnodes: 1\nimage: %s\n%s"
        "env:\n  TOKEN: \"${{ secrets.HF_TOKEN }}\"\n"
        "commands:\n  - 'printf %%s \"$TOKEN\" | sha256sum'\n"
        % (name, world["base_image"], CPU)))
    try:
        assert cli.main(["apply", "-f", path, "-y"]) == 0
        shown = capsys.readouterr()
        assert value not in shown.out and value not in shown.err

        # Again, straight through the playbook at -vvvv (it replaces the finished run).
        monkeypatch.setenv("ANSIBLE_VERBOSITY", "4")
        result = run_playbook("task.yml", {"task": path})
        monkeypatch.delenv("ANSIBLE_VERBOSITY")
        assert result.ok, result.stdout[-4000:]
        assert "task path:" in result.stdout  # the verbosity was in effect
        assert value not in result.stdout
        record = result.stats["gpufleet_run"]
        assert record["status"] == "done"
        assert value not in json.dumps(result.stats)

        # The job saw the value: it printed its digest.
        digest = hashlib.sha256(value.encode()).hexdigest()
        assert logs(name)[0] == ["%s  -" % digest]

        # Not in the task container's inspect output (options, Env, labels).
        job = record["jobs"][0]
        node = local.container_name(FLEET, int(job["host"].rsplit("-", 1)[1]))
        inspected = world["docker"].run("exec", node, "docker", "inspect", job["container"])
        assert value not in inspected
        labels = json.loads(inspected)[0]["Config"]["Labels"]
        assert labels and value not in json.dumps(labels)

        # Not in gpufleet ps.
        assert cli.main(["ps", "--json"]) == 0
        assert value not in capsys.readouterr().out

        # Not in any file of the state dir but the encrypted store.
        store = os.path.join(state, "secrets.yml")
        with open(store, "rb") as handle:
            assert handle.read().startswith(b"$ANSIBLE_VAULT;")
        for root, _dirs, files in os.walk(state):
            for file_name in files:
                file_path = os.path.join(root, file_name)
                if file_path != store:
                    with open(file_path, "rb") as handle:
                        assert value.encode() not in handle.read(), file_path

        # The node's env file holds it, mode 0600.
        env_file = "/var/lib/gpufleet/runs/%s/0/job/env.sh" % name
        assert "export TOKEN='%s'" % value in world["docker"].run("exec", node, "cat", env_file)
        assert world["docker"].run("exec", node, "stat", "-c", "%a", env_file).strip() == "600"
    finally:
        capsys.readouterr()
        cli.main(["secret", "delete", "HF_TOKEN", "-y"])
