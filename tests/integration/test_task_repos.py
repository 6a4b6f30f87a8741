"""A task's code (``repos``) on a real local fleet: what ships, where it lands, edits between runs.

Uses the shared 3-node task world (tests/integration/task_world.py)."""

from __future__ import annotations

import subprocess

from gpufleet import cli

from .task_world import CPU, FLEET, SUFFIX, logs


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com"] + list(args),
                   cwd=str(cwd), check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_local_repo_reaches_every_node_as_dstack_ships_it(world, tmp_path, capsys):
    """tracked, modified and untracked files arrive in the working folder of both nodes, the
    ignored file does not, the variables are dstack's, and an edit shows in the next run."""
    code = tmp_path / "project"
    code.mkdir()
    git(code, "init", "-q", "-b", "main")
    (code / "train.py").write_text("print('train v1')\n")
    (code / "lib.py").write_text("VALUE = 'committed'\n")
    (code / ".gitignore").write_text("*.ckpt\n")
    git(code, "add", "-A")
    git(code, "commit", "-q", "-m", "one")
    (code / "lib.py").write_text("VALUE = 'modified'\n")
    (code / "notes.txt").write_text("untracked\n")
    (code / "weights.ckpt").write_text("ignored\n")
    name = "repo-" + SUFFIX
    task = code / ".dstack.yml"
    task.write_text(
        "type: task\nname: %s\nnodes: 2\n%srepos:\n  - .\n"
        "commands:\n"
        "  - echo PWD $(pwd) REPO $DSTACK_REPO_DIR WD $DSTACK_WORKING_DIR ID $DSTACK_REPO_ID\n"
        "  - ls -A | sort | tr '\\n' ' '; echo\n"
        "  - python3 train.py\n"
        "  - python3 -c 'import lib; print(lib.VALUE)'\n"
        "  - cat notes.txt\n" % (name, CPU))
    assert cli.main(["apply", "-f", str(task), "-y", "--fleet", FLEET]) == 0
    out = logs(name)
    for rank in (0, 1):
        lines = out[rank]
        head = lines[0].split()
        assert head[:6] == ["PWD", "/dstack/run", "REPO", "/dstack/run", "WD", "/dstack/run"]
        assert head[7].startswith("project-")
        assert lines[1].split() == [".dstack.yml", ".gitignore", "lib.py", "notes.txt",
                                    "train.py"]
        assert lines[2:] == ["train v1", "modified", "untracked"]
    # An edit between two runs is in the second one (a new archive, sent again).
    (code / "train.py").write_text("print('train v2')\n")
    capsys.readouterr()
    assert cli.main(["apply", "-f", str(task), "-y", "--fleet", FLEET]) == 0
    assert "sent to" in capsys.readouterr().out
    assert [logs(name)[r][2] for r in (0, 1)] == ["train v2", "train v2"]


class _GitHttp(object):
    """Git's dumb HTTP protocol from a folder of bare repos: ``public.git`` for anyone,
    ``private.git`` only with basic auth whose password is ``token``."""

    def __init__(self, root, token):
        import base64
        import functools
        import http.server
        import threading

        expected = "Basic " + base64.b64encode(("anything:%s" % token).encode()).decode()

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):
                if self.path.startswith("/private.git") and (
                        self.headers.get("Authorization") != expected):
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.end_headers()
                    return
                super().do_GET()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(
            ("0.0.0.0", 0), functools.partial(Handler, directory=str(root)))
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def bare_repo(tmp_path, name, files, branch="main"):
    work = tmp_path / (name + "-work")
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    for rel, text in files.items():
        (work / rel).write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "first")
    if branch != "main":
        git(work, "checkout", "-q", "-b", branch)
        (work / "BRANCH").write_text(branch + "\n")
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", branch)
    served = tmp_path / "served"
    served.mkdir(exist_ok=True)
    git(tmp_path, "clone", "-q", "--bare", str(work), str(served / (name + ".git")))
    git(served / (name + ".git"), "update-server-info")


def test_remote_repos_are_cloned_on_every_node_with_a_branch_and_a_stored_token(
        world, tmp_path, capsys, monkeypatch):
    token = "gft-" + SUFFIX + "-token"
    bare_repo(tmp_path, "public", {"hello.py": "print('public')\n"}, branch="dev")
    bare_repo(tmp_path, "private", {"hello.py": "print('private')\n"})
    server = _GitHttp(tmp_path / "served", token)
    gateway = world["docker"].run("network", "inspect", "--format",
                                  "{{(index .IPAM.Config 0).Gateway}}",
                                  "gpufleet-" + FLEET).strip()
    base = "http://%s:%d" % (gateway, server.port)
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(world["vault_password"]))
    try:
        public = tmp_path / "public.dstack.yml"
        name = "rpub-" + SUFFIX
        public.write_text(
            "type: task\nname: %s\nnodes: 2\n%s"
            "repos:\n  - url: %s/public.git\n    branch: dev\n"
            "commands:\n  - python3 hello.py; cat BRANCH; git rev-parse --abbrev-ref HEAD\n"
            % (name, CPU, base))
        assert cli.main(["apply", "-f", str(public), "-y", "--fleet", FLEET]) == 0
        assert [logs(name)[r] for r in (0, 1)] == [["public", "dev", "dev"]] * 2

        private = tmp_path / "private.dstack.yml"
        name = "rpriv-" + SUFFIX
        private.write_text(
            # (the mapping form: in the string form, as in dstack, a second ':' starts the path)
            "type: task\nname: %s\n%srepos:\n  - url: %s/private.git\n"
            "commands: [python3 hello.py]\n" % (name, CPU, base))
        # Without the credential the clone is refused, and the job says what to set.
        capsys.readouterr()
        assert cli.main(["apply", "-f", str(private), "-y", "--fleet", FLEET]) == 1
        assert "a private repo needs the secret GIT_TOKEN or GIT_SSH_KEY" in "\n".join(
            logs(name)[0])
        assert cli.main(["secret", "set", "GIT_TOKEN", token]) == 0
        assert cli.main(["apply", "-f", str(private), "-y", "--fleet", FLEET]) == 0
        assert logs(name)[0] == ["private"]
        shown = capsys.readouterr()
        assert token not in shown.out + shown.err
        assert cli.main(["ps", "--json"]) == 0
        assert token not in capsys.readouterr().out
    finally:
        server.close()
        cli.main(["secret", "delete", "-y", "GIT_TOKEN"])


def test_files_copy_a_folder_and_a_file_to_every_node(world, tmp_path):
    """A ``files`` entry that is a folder reaches the container with its files (less what
    .gitignore excludes), modes and links, as dstack copies it; a file beside it too."""
    conf = tmp_path / "conf"
    (conf / "sub").mkdir(parents=True)
    (conf / "app.yml").write_text("a: 1\n")
    (conf / "run.sh").write_text("#!/bin/sh\necho RAN\n")
    (conf / "run.sh").chmod(0o755)
    (conf / "sub" / "deep.txt").write_text("deep\n")
    (conf / ".gitignore").write_text("*.ckpt\n")
    (conf / "big.ckpt").write_text("ignored\n")
    (conf / "link").symlink_to("sub/deep.txt")
    (tmp_path / "single.txt").write_text("one\n")
    name = "files-" + SUFFIX
    task = tmp_path / "files.dstack.yml"
    task.write_text(
        "type: task\nname: %s\nnodes: 2\n%sfiles:\n  - conf:/data/conf\n  - single.txt\n"
        "commands:\n"
        "  - cd /data/conf && find . -mindepth 1 | sort | tr '\\n' ' '; echo\n"
        "  - /data/conf/run.sh\n"
        "  - cat /data/conf/link $DSTACK_WORKING_DIR/single.txt\n" % (name, CPU))
    assert cli.main(["apply", "-f", str(task), "-y", "--fleet", FLEET]) == 0
    out = logs(name)
    for rank in (0, 1):
        assert out[rank][0].split() == ["./.gitignore", "./app.yml", "./link", "./run.sh",
                                        "./sub", "./sub/deep.txt"], out[rank]
        assert out[rank][1:] == ["RAN", "deep", "one"], out[rank]
