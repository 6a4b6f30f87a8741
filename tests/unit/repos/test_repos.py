# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A task's code: what a local repo ships (repos.local), dstack's repo id (repos.ids) and the
archive reaching hosts once (repos.ship), with real git, tar and sh."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.repos import ids, local, ship


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com"] + list(args),
                   cwd=str(cwd), check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.fixture
def repo(tmp_path):
    """A Git work tree: tracked, modified, deleted, untracked, ignored and .dstackignore'd
    files, a nested folder, and a remote named origin."""
    root = tmp_path / "code"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "train.py").write_text("print('v1')\n")
    (root / "README.md").write_text("readme\n")
    (root / "gone.txt").write_text("soon deleted\n")
    (root / "src").mkdir()
    (root / "src" / "model.py").write_text("M = 1\n")
    (root / ".gitignore").write_text("*.ckpt\ndata/\n")
    (root / ".dstackignore").write_text("scratch.bin\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "one")
    git(root, "remote", "add", "origin", "git@github.com:acme/train-code.git")
    (root / "train.py").write_text("print('v2')\n")            # modified
    os.remove(str(root / "gone.txt"))                           # deleted
    (root / "notes.txt").write_text("untracked\n")             # untracked
    (root / "model.ckpt").write_text("ignored\n")              # ignored
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_text("ignored too\n")
    (root / "scratch.bin").write_text("dstackignored\n")
    return root


def names(archive):
    with tarfile.open(archive["path"]) as tar:
        return sorted(m.name for m in tar.getmembers())


def test_a_git_repo_ships_tracked_changed_and_untracked_files_but_never_ignored_ones(repo):
    snap = local.snapshot(str(repo))
    assert snap.git
    assert snap.files == [".dstackignore", ".gitignore", "README.md", "notes.txt",
                          "src/model.py", "train.py"]
    # what dstack would upload: the changes since the commit and the untracked files
    assert snap.changed == ["notes.txt", "train.py"]
    assert snap.branch == "main" and len(snap.commit) == 40
    assert snap.url == "git@github.com:acme/train-code.git"
    assert snap.repo_id == ids.repo_id("https://github.com/acme/train-code")


def test_a_subfolder_of_a_work_tree_ships_only_that_folder(repo):
    snap = local.snapshot(str(repo / "src"))
    assert snap.files == ["model.py"]


def test_a_repo_without_commits_counts_every_file_as_changed(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("a")
    snap = local.snapshot(str(tmp_path))
    assert snap.files == ["a.py"] and snap.changed == ["a.py"] and snap.commit is None
    assert snap.repo_id.startswith(os.path.basename(str(tmp_path)) + "-")


def test_a_plain_folder_ships_all_but_what_gitignore_and_dstackignore_exclude(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "run.sh").write_text("echo hi\n")
    (tmp_path / "sub" / "x.py").write_text("x\n")
    (tmp_path / "out.log").write_text("log\n")
    (tmp_path / "sub" / "tmp.bin").write_text("bin\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    (tmp_path / "sub" / ".dstackignore").write_text("*.bin\n")
    snap = local.snapshot(str(tmp_path))
    assert not snap.git
    assert snap.files == [".gitignore", "run.sh", "sub/.dstackignore", "sub/x.py"]
    assert snap.changed == snap.files


def test_relative_paths_start_at_the_task_files_folder(tmp_path, monkeypatch):
    (tmp_path / "proj" / "code").mkdir(parents=True)
    monkeypatch.chdir(str(tmp_path))
    assert local.resolve("code", str(tmp_path / "proj")) == str(tmp_path / "proj" / "code")
    assert local.resolve(".", None) == str(tmp_path)
    with pytest.raises(local.RepoError) as caught:
        local.resolve("missing", str(tmp_path / "proj"))
    assert str(caught.value) == (
        "repos[0].local_path: %s is not a folder on this controller (relative paths start at "
        "the task file's folder, %s)" % (tmp_path / "proj" / "missing", tmp_path / "proj"))


def test_the_upload_limit_is_dstacks_and_counts_what_dstack_would_upload(repo):
    (repo / "README.md").write_text("x" * 3 * 2 ** 20)   # committed-then-changed: counts
    snap = local.snapshot(str(repo))
    with pytest.raises(local.RepoError) as caught:
        snap.check_limit({})
    assert ("repos[0]: the repo's uncommitted and untracked files in %s come to 3.0MiB, which "
            "exceeds the limit of 2.0MiB. Use .gitignore (or .dstackignore) to exclude large "
            "files from the repo, or commit them. This limit can be modified by setting the "
            "DSTACK_SERVER_CODE_UPLOAD_LIMIT environment variable (0: no limit)." % repo
            ) == str(caught.value)
    snap.check_limit({"DSTACK_SERVER_CODE_UPLOAD_LIMIT": "0"})
    snap.check_limit({"DSTACK_SERVER_CODE_UPLOAD_LIMIT": str(4 * 2 ** 20)})
    with pytest.raises(local.RepoError, match="is not a number of bytes"):
        snap.check_limit({"DSTACK_SERVER_CODE_UPLOAD_LIMIT": "2MB"})
    # a big committed file is in the tree but not over the limit: it is not a change
    git(repo, "commit", "-q", "-am", "big")
    local.snapshot(str(repo)).check_limit({})


def test_the_archive_holds_the_snapshot_and_the_same_tree_gives_the_same_name(repo, tmp_path):
    snap = local.snapshot(str(repo))
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    first = local.build_archive(snap, str(first_dir))
    second = local.build_archive(local.snapshot(str(repo)), str(second_dir))
    assert first["sha256"] == second["sha256"]
    assert os.path.basename(first["path"]) == first["sha256"] + ".tar.gz"
    assert first["files"] == 6 and first["size"] == os.path.getsize(first["path"])
    assert names(first) == snap.files
    with tarfile.open(first["path"]) as tar:
        member = tar.getmember("train.py")
        assert (member.uid, member.gid, member.uname) == (0, 0, "")
        assert tar.extractfile(member).read() == b"print('v2')\n"
    (repo / "train.py").write_text("print('v3')\n")
    third_dir = tmp_path / "c"
    third_dir.mkdir()
    assert local.build_archive(local.snapshot(str(repo)), str(third_dir))["sha256"] != (
        first["sha256"])


@pytest.mark.parametrize("url", ["https://github.com/dstackai/dstack.git",
                                 "https://github.com/dstackai/dstack",
                                 "git@github.com:dstackai/dstack.git",
                                 "ssh://git@GitHub.com/dstackai/dstack/"])
def test_the_repo_id_is_dstacks(url):
    # the value dstack's own slugify gives for github.com/dstackai/dstack
    assert ids.repo_id(url) == "dstack-nizdmsg0"


def test_no_repo_is_none_and_bad_urls_are_refused():
    assert ids.repo_id() == "none"
    with pytest.raises(ids.RepoUrlError, match="could not parse the Git URL"):
        ids.repo_id("not a url")
    with pytest.raises(ids.RepoUrlError, match="unsupported URL scheme ftp"):
        ids.repo_id("ftp://host/x")


class ShellNode(object):
    """A host reached with plain sh on this machine (its REPOS_ROOT moved under tmp). With
    ``own``, the host keeps its archives in a folder of its own: its commands name ``own``
    where they name ``shared`` (the REPOS_ROOT that ship puts in them)."""

    sudo = ""

    def __init__(self, name, shared=None, own=None):
        self.name = name
        self.commands = []
        self.swap = (str(shared), str(own)) if own is not None else None

    def _here(self, command):
        return command.replace(*self.swap) if self.swap else command

    def argv(self, command):
        self.commands.append(command)
        return ["sh", "-c", self._here(command)]

    def run(self, command, timeout=None):
        self.commands.append(command)
        proc = subprocess.run(["sh", "-c", self._here(command)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, check=False)
        return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def test_an_archive_is_sent_once_per_host_and_kept_by_its_hash(repo, tmp_path, monkeypatch):
    # Two hosts, each with its own disk: they are sent to at the same time, so one sharing
    # the other's folder could find the archive there already.
    shared = tmp_path / "REPOS_ROOT"
    monkeypatch.setattr(ship, "REPOS_ROOT", str(shared))
    roots = dict((h, tmp_path / h / "repos") for h in ("h0", "h1"))
    out = tmp_path / "out"
    out.mkdir()
    archive = local.build_archive(local.snapshot(str(repo)), str(out))
    nodes = dict((h, ShellNode(h, shared, roots[h])) for h in roots)
    assert ship.ship(archive, nodes, ["h1", "h0", "h1"]) == {"h0": "sent", "h1": "sent"}
    for root in roots.values():
        landed = root / (archive["sha256"] + ".tar.gz")
        with open(str(landed), "rb") as got, open(archive["path"], "rb") as sent:
            assert got.read() == sent.read()
        assert not [p for p in os.listdir(str(root)) if ".part" in p]
    assert not shared.exists()
    assert ship.ship(archive, nodes, ["h0", "h1"]) == {"h0": "present", "h1": "present"}
    # One host lost it (a new disk): only that one is sent to.
    os.remove(str(roots["h1"] / (archive["sha256"] + ".tar.gz")))
    assert ship.ship(archive, nodes, ["h0", "h1"]) == {"h0": "present", "h1": "sent"}


def test_a_host_that_cannot_take_the_archive_is_named(repo, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(ship, "REPOS_ROOT", str(blocker / "repos"))
    out = tmp_path / "out"
    out.mkdir()
    archive = local.build_archive(local.snapshot(str(repo)), str(out))
    with pytest.raises(ship.ShipError, match=r"^h0: could not receive the repo archive"):
        ship.ship(archive, {"h0": ShellNode("h0")}, ["h0"])


def test_old_unlinked_archives_are_pruned_when_a_new_one_arrives(repo, tmp_path, monkeypatch):
    root = tmp_path / "hostrepos"
    root.mkdir()
    monkeypatch.setattr(ship, "REPOS_ROOT", str(root))
    old, held = root / "old.tar.gz", root / "held.tar.gz"
    old.write_bytes(b"x")
    held.write_bytes(b"y")
    os.link(str(held), str(tmp_path / "job-link"))   # a job folder still holds it
    for path in (old, held):
        os.utime(str(path), (1, 1))
    out = tmp_path / "out"
    out.mkdir()
    archive = local.build_archive(local.snapshot(str(repo)), str(out))
    ship.ship(archive, {"h0": ShellNode("h0")}, ["h0"])
    assert not old.exists() and held.exists()
    assert (root / (archive["sha256"] + ".tar.gz")).exists()


def test_size_text_as_dstack_prints_sizes():
    assert [local.size_text(n) for n in (0, 1023, 2 * 2 ** 20, 5 * 2 ** 30)] == [
        "0.0B", "1023.0B", "2.0MiB", "5.0GiB"]


# ---------------------------------------------------------------------------------------------
# Remote repos: the credential goes to 0600 files only


def test_a_remote_repos_credential_is_chosen_by_the_urls_scheme():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.code import Code

    secrets = {"GIT_TOKEN": "tok-123", "GIT_SSH_KEY": "-----BEGIN KEY-----\nabc"}
    https = Code({"url": "https://github.com/acme/private.git", "branch": "dev", "hash": None})
    assert https.remote(secrets) == {"url": "https://github.com/acme/private.git",
                                     "branch": "dev", "hash": None, "token": "tok-123",
                                     "repo_id": ids.repo_id("https://github.com/acme/private")}
    ssh = Code({"url": "git@github.com:acme/private.git"})
    assert ssh.remote(secrets)["ssh_key"] == "-----BEGIN KEY-----\nabc\n"
    assert "token" not in ssh.remote(secrets)
    assert set(https.remote({})) == {"url", "branch", "hash", "repo_id"}


def test_the_token_and_key_travel_in_0600_files_never_in_env_or_labels():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import rankplan

    config = parse_data({"type": "task", "image": "alpine/git", "commands": ["ls"],
                         "repos": [{"url": "https://github.com/acme/private.git"}]})[0]
    placed = {"fleet": "f", "placement": "any", "jobs": [{
        "job_num": 0, "host": "f-0", "fleet": "f", "internal_ip": "10.0.0.2", "gpus": [],
        "blocks": 1, "total_blocks": 1, "backend": "ssh", "whole_host": True}]}
    run = {"name": "clone", "id": "r1", "submission": 0, "submitted_at": None}
    repo = {"url": "https://github.com/acme/private.git", "branch": None, "hash": None,
            "token": "tok-SECRET", "repo_id": "private-1"}
    job = rankplan.build_jobs(config, placed, run, environ={}, repo=repo)[0]
    assert job["files"]["repo/token"] == {"text": "tok-SECRET", "mode": 0o600}
    assert job["files"]["repo/askpass"]["mode"] == 0o700
    env = job["files"]["env.sh"]["text"]
    assert "tok-SECRET" not in env and "GPUFLEET_REPO_URL='https://github.com/acme/private.git'" in env
    assert "tok-SECRET" not in repr(job["labels"]) + repr(job["docker_args"])
    assert "DSTACK_REPO_ID='private-1'" in env


def test_files_that_do_not_compress_are_stored_and_the_archive_is_one_gzip_stream(repo,
                                                                                  tmp_path):
    import gzip

    (repo / "weights.bin").write_bytes(os.urandom(300000))
    (repo / "big.txt").write_text("the same line again\n" * 20000)
    snap = local.snapshot(str(repo))
    out = tmp_path / "out"
    out.mkdir()
    archive = local.build_archive(snap, str(out))
    # the random bytes are stored (about their own size), the text shrinks to almost nothing
    assert 300000 < archive["size"] < 300000 + 60000
    with gzip.open(archive["path"]) as stream:   # gzip reads the members as one stream
        data = stream.read()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.extractfile("weights.bin").read() == (repo / "weights.bin").read_bytes()
        assert sorted(tar.getnames()) == snap.files
    # tar itself unpacks it, as the wrapper does
    target = tmp_path / "unpacked"
    target.mkdir()
    subprocess.run(["tar", "-xzf", archive["path"], "-C", str(target)], check=True)
    assert (target / "big.txt").read_text() == (repo / "big.txt").read_text()
    # and the same tree still gives the same archive
    again = tmp_path / "again"
    again.mkdir()
    assert local.build_archive(local.snapshot(str(repo)), str(again))["sha256"] == (
        archive["sha256"])
