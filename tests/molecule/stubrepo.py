"""Stub package repositories standing in for vendors' repositories in Molecule tests.

A scenario's ``stubs.yml`` describes what the role under test downloads from vendors: apt
repositories (Docker's, NVIDIA's CUDA and container toolkit repositories, AMD's, DOCA's), single
.deb files (``cuda-keyring``), tarballs (``aws-efa-installer``) and plain files. This script
builds them under one directory, laid out at the same paths as on the vendors' servers, and
signs every repository with a test key, so the role's real steps run against it: the key is
fetched into a keyring, the source is added with ``signed-by``, apt verifies the signed
Release file, installs the pinned version, and the package's files and scripts land on disk.

    python tests/molecule/stubrepo.py SPEC.yml OUT_DIR

The spec (YAML)::

    repos:                                # apt repositories
      - path: linux/debian                # where under OUT_DIR (the URL path)
        suite: bookworm                   # a "dists/<suite>/<component>" repository ...
        components: [stable]
        # architectures: [amd64]          # the binary-<arch> indexes (all, for arch-less repos)
        # flat: true                      # ... or a flat one (Packages and Release in path)
        keys: [linux/debian/gpg]          # where to publish the public key (armored; a
                                          #   ".gpg" suffix gets a binary keyring)
        packages: [PACKAGE, ...]
    debs:                                 # .deb files served on their own
      - path: compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb
        package: PACKAGE
    tarballs:                             # .tar.gz files, members given inline
      - path: aws-efa-installer-1.38.0.tar.gz
        members:
          - {name: aws-efa-installer/efa_installer.sh, mode: "0755", content: "..."}
    files:
      - {path: some/file, content: "..."}

    PACKAGE: {name, version (or versions: [...], one package each), architecture (amd64), depends, provides, conflicts, replaces,
              description, files: [{path, content, mode}], postinst, prerm, postrm,
              from_debs: [DEBIAN PACKAGE, ...], include: [PATH PREFIX, ...],
              exclude: [PATH PREFIX, ...], scripts_from: DEBIAN PACKAGE}

``from_debs`` fills a stub with the real files of Debian packages (fetched with
``apt-get download`` from this machine's configured mirror and cached), e.g. a ``docker-ce`` that
carries Debian's dockerd, so the service a role configures really runs. ``include``/``exclude``
keep or drop paths by prefix; ``scripts_from`` takes that package's maintainer scripts and
conffiles.

``{KEYRING}`` in any content is replaced by the armored public key, so a stub ``cuda-keyring``
package can install the key the way the real one does.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpufleet" / "molecule"
KEY_UID = "gpufleet molecule stub repositories <molecule@gpufleet.invalid>"


class StubError(Exception):
    pass


def _run(argv, **kwargs):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False,
                          **kwargs)
    if proc.returncode != 0:
        raise StubError("%s failed: %s" % (" ".join(argv), proc.stdout.decode(errors="replace")))
    return proc.stdout


@contextlib.contextmanager
def cache_lock():
    """The cache to this process alone until the block ends (other builds wait). Scenarios run
    side by side, and on a fresh machine two of them would make the key and fetch the same
    .debs at once (gpg then fails on a keyring the other just replaced), so whatever fills the
    cache holds it. Not the whole build: building Docker's stubs takes a minute."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def gnupg_home():
    """A GnuPG home with the signing key, made once and kept in the cache."""
    home = CACHE / "gnupg"
    with cache_lock():
        if not (home / "ready").exists():
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir(parents=True, mode=0o700)
            _run(["gpg", "--batch", "--homedir", str(home), "--passphrase", "",
                  "--quick-generate-key", KEY_UID, "rsa3072", "sign", "never"])
            (home / "ready").write_text("")
    return home


def public_key(armor=True):
    argv = ["gpg", "--batch", "--homedir", str(gnupg_home()), "--export"]
    if armor:
        argv.append("--armor")
    return _run(argv + [KEY_UID])


def debian_deb(name):
    """Debian's .deb of ``name`` for this machine's mirror, downloaded once into the cache."""
    cache = CACHE / "debs"
    with cache_lock():
        cache.mkdir(parents=True, exist_ok=True)
        found = sorted(cache.glob("%s_*.deb" % name))
        if not found:
            try:
                _run(["apt-get", "download", name], cwd=str(cache))
            except StubError as exc:
                raise StubError("%s (run `apt-get update` if the package lists are empty)"
                                % exc)
            found = sorted(cache.glob("%s_*.deb" % name))
    if not found:
        raise StubError("apt-get download %s left no .deb in %s" % (name, cache))
    return found[-1]


def _keep(rel, include, exclude):
    if include and not any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in include):
        return False
    return not any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in exclude)


def _fill_from_debs(package, root, control):
    include = [p.strip("/") for p in package.get("include", [])]
    exclude = [p.strip("/") for p in package.get("exclude", [])]
    for name in package.get("from_debs", []):
        extracted = Path(tempfile.mkdtemp(dir=root.parent))
        _run(["dpkg-deb", "-x", str(debian_deb(name)), str(extracted)])
        for path in sorted(extracted.rglob("*")):
            rel = str(path.relative_to(extracted))
            if path.is_dir() and not path.is_symlink():
                continue
            if not _keep(rel, include, exclude):
                continue
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                if not target.is_symlink():
                    target.symlink_to(os.readlink(path))
            else:
                shutil.copy2(path, target)
        shutil.rmtree(extracted)
    if package.get("scripts_from"):
        meta = Path(tempfile.mkdtemp(dir=root.parent))
        _run(["dpkg-deb", "-e", str(debian_deb(package["scripts_from"])), str(meta)])
        for script in ("preinst", "postinst", "prerm", "postrm"):
            if (meta / script).exists():
                shutil.copy2(meta / script, control / script)
        if (meta / "conffiles").exists():
            kept = [line for line in (meta / "conffiles").read_text().splitlines()
                    if line.strip() and (root / line.strip().lstrip("/")).exists()]
            if kept:
                (control / "conffiles").write_text("\n".join(kept) + "\n")
        shutil.rmtree(meta)


def build_deb(package, workdir, armored_key):
    """A .deb for the PACKAGE spec (built with dpkg-deb); returns its path."""
    name, version = package["name"], str(package["version"])
    arch = package.get("architecture", "amd64")
    root = Path(tempfile.mkdtemp(dir=workdir))
    control = root / "DEBIAN"
    control.mkdir()
    _fill_from_debs(package, root, control)
    fields = [("Package", name), ("Version", version), ("Architecture", arch),
              ("Maintainer", "gpufleet tests <molecule@gpufleet.invalid>")]
    for key, field in (("depends", "Depends"), ("provides", "Provides"),
                       ("conflicts", "Conflicts"), ("replaces", "Replaces")):
        if package.get(key):
            fields.append((field, package[key]))
    fields.append(("Description", package.get("description", "stub of %s for tests" % name)))
    (control / "control").write_text("".join("%s: %s\n" % f for f in fields))
    for script in ("postinst", "prerm", "postrm", "preinst"):
        if package.get(script):
            path = control / script
            path.write_text(package[script])
            path.chmod(0o755)
    for item in package.get("files", []):
        path = root / item["path"].lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(item.get("content", "").replace("{KEYRING}", armored_key))
        path.chmod(int(str(item.get("mode", "0644")), 8))
    out = Path(workdir) / ("%s_%s_%s.deb" % (name, version.replace(":", "%3a"), arch))
    # Uncompressed: a stub filled from Debian's docker.io holds 100 MB of binaries, and
    # compressing them took a minute of CPU per scenario run (then each install unpacked them).
    # The files are served on the scenario's own network, where size costs nothing.
    _run(["dpkg-deb", "--root-owner-group", "-Znone", "--build", str(root), str(out)])
    shutil.rmtree(root)
    return out


def _hashes(data):
    return {"MD5Sum": hashlib.md5(data).hexdigest(), "SHA256": hashlib.sha256(data).hexdigest()}


def _packages_entry(deb, filename):
    control = _run(["dpkg-deb", "--field", str(deb)]).decode().rstrip("\n")
    data = deb.read_bytes()
    sums = _hashes(data)
    return "%s\nFilename: %s\nSize: %d\nMD5sum: %s\nSHA256: %s\n" % (
        control, filename, len(data), sums["MD5Sum"], sums["SHA256"])


def _release(index_files, suite=None, components=None, arch="amd64"):
    """Release file text for {relative path: bytes}."""
    lines = ["Origin: gpufleet-stub", "Label: gpufleet-stub"]
    if suite:
        lines += ["Suite: %s" % suite, "Codename: %s" % suite,
                  "Components: %s" % " ".join(components), "Architectures: %s" % arch]
    lines.append("Date: Thu, 01 Jan 2026 00:00:00 UTC")
    for field in ("MD5Sum", "SHA256"):
        lines.append("%s:" % field)
        for rel, data in sorted(index_files.items()):
            lines.append(" %s %d %s" % (_hashes(data)[field], len(data), rel))
    return "\n".join(lines) + "\n"


def _sign(release_path):
    home = str(gnupg_home())
    base = ["gpg", "--batch", "--yes", "--homedir", home, "--local-user", KEY_UID]
    _run(base + ["--clearsign", "-o", str(release_path.parent / "InRelease"),
                 str(release_path)])
    _run(base + ["--armor", "--detach-sign", "-o", str(release_path) + ".gpg",
                 str(release_path)])


def _each_version(packages):
    """A package given with ``versions: [a, b]`` is that package once per version."""
    for package in packages:
        versions = package.get("versions")
        if versions is None:
            yield package
            continue
        for version in versions:
            yield dict((k, v) for k, v in package.items() if k != "versions") | {
                "version": version}


def build_repo(repo, out, workdir, armored_key):
    base = out / repo["path"].strip("/")
    base.mkdir(parents=True, exist_ok=True)
    debs = [build_deb(p, workdir, armored_key) for p in _each_version(repo.get("packages", []))]
    if repo.get("flat"):
        entries = []
        for deb in debs:
            shutil.copy(deb, base / deb.name)
            entries.append(_packages_entry(base / deb.name, "./" + deb.name))
        packages = "\n".join(entries).encode()
        index = {"Packages": packages, "Packages.gz": gzip.compress(packages, mtime=0)}
        for rel, data in index.items():
            (base / rel).write_bytes(data)
        release = base / "Release"
        release.write_text(_release(index))
    else:
        suite, components = repo["suite"], repo.get("components", ["main"])
        arches = repo.get("architectures", ["amd64"])
        dist = base / "dists" / suite
        index = {}
        for component in components:
            pool = base / "pool" / component
            pool.mkdir(parents=True, exist_ok=True)
            entries = []
            for deb in debs:
                shutil.copy(deb, pool / deb.name)
                entries.append(_packages_entry(pool / deb.name,
                                               "pool/%s/%s" % (component, deb.name)))
            packages = "\n".join(entries).encode()
            for arch in arches:
                rel = "%s/binary-%s/Packages" % (component, arch)
                index[rel] = packages
                index[rel + ".gz"] = gzip.compress(packages, mtime=0)
        for rel, data in index.items():
            (dist / rel).parent.mkdir(parents=True, exist_ok=True)
            (dist / rel).write_bytes(data)
        release = dist / "Release"
        release.write_text(_release(index, suite, components, " ".join(arches)))
    _sign(release)
    for key in repo.get("keys", []):
        path = out / key.strip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(public_key(armor=not key.endswith(".gpg")))


def build_tarball(spec, out, armored_key):
    path = out / spec["path"].strip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for member in spec["members"]:
            data = member.get("content", "").replace("{KEYRING}", armored_key).encode()
            info = tarfile.TarInfo(member["name"])
            info.size = len(data)
            info.mode = int(str(member.get("mode", "0644")), 8)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))


def build(spec_path, out):
    spec = yaml.safe_load(Path(spec_path).read_text()) or {}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    armored_key = public_key().decode()
    workdir = tempfile.mkdtemp(prefix="gpufleet-stubs-")
    try:
        for repo in spec.get("repos", []):
            build_repo(repo, out, workdir, armored_key)
        for item in spec.get("debs", []):
            deb = build_deb(item["package"], workdir, armored_key)
            target = out / item["path"].strip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(deb, target)
        for item in spec.get("tarballs", []):
            build_tarball(item, out, armored_key)
        for item in spec.get("files", []):
            target = out / item["path"].strip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(item.get("content", "").replace("{KEYRING}", armored_key))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: stubrepo.py SPEC.yml OUT_DIR")
    try:
        build(sys.argv[1], sys.argv[2])
    except (StubError, OSError, KeyError, yaml.YAMLError) as exc:
        sys.exit("stub repositories from %s: %s" % (sys.argv[1], exc))
