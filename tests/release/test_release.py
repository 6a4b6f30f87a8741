"""Release tier: what users of the released collection and of its execution environment get.

Everything runs on a copy of the files git knows about (what ``make collection`` copies), in a
temporary directory, so untracked junk in the checkout cannot leak in and nothing is written
back:

* the collection tarball ``ansible-galaxy collection build`` makes: its name, its manifest and
  its file list (build_ignore honoured, the content Galaxy needs present);
* the tarball installed into an empty collections path, used alone: ``ansible-doc`` renders
  every module, plugin and role found in the files, ``ansible-playbook --syntax-check`` loads
  every playbook;
* galaxy-importer, what Galaxy and Automation Hub run on an uploaded tarball (metadata, docs,
  ansible-lint; ansible-test sanity has its own tier, ``make sanity``);
* ``ansible-builder create`` on execution-environment.yml: the build context, and the galaxy and
  builder stages' own commands replayed here on it (the image itself is not built: that needs a
  container engine and the base image's registry).
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NAMESPACE, NAME = "gpufleet", "cluster"
FQ = f"{NAMESPACE}.{NAME}"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# plugins/<dir> -> the ansible-doc type documenting it. Directories with no docs of their own:
# code shared by plugins, doc fragments (rendered inside the plugins using them) and action
# plugins (documented by the module of the same name, see test_action_plugins_have_module_docs).
PLUGIN_DOC_TYPES = {
    "modules": "module", "inventory": "inventory", "filter": "filter", "test": "test",
    "lookup": "lookup", "callback": "callback", "connection": "connection", "become": "become",
    "cache": "cache", "cliconf": "cliconf", "httpapi": "httpapi", "netconf": "netconf",
    "shell": "shell", "strategy": "strategy", "vars": "vars",
}
UNDOCUMENTED_PLUGIN_DIRS = {"module_utils", "plugin_utils", "doc_fragments", "action"}

# Never in the tarball, whatever galaxy.yml's build_ignore says: the gpufleet command's Python
# package and its packaging, the repository's tooling and every kind of local output.
MUST_NOT_SHIP = [
    "gpufleet", "pyproject.toml", "Makefile", "scripts", "bench", "build", ".venv",
    "*.egg-info", "tests/output", ".pytest_cache", ".hypothesis", ".cache", ".ansible",
    "*.tar.gz",
]
# Always in the tarball (every file git knows under these), besides every plugin, role and
# playbook.
MUST_SHIP = [
    "README.md", "LICENSE", "meta", "plugins", "roles", "playbooks", "docs", "changelogs",
]

# Registries whose images anyone can pull without an account.
PUBLIC_REGISTRIES = {"quay.io", "docker.io", "ghcr.io", "registry.fedoraproject.org"}

# ansible-lint, as galaxy-importer runs it, looks for a playbook imported by FQCN under
# <ANSIBLE_COLLECTIONS_PATH>/ansible_collections/..., but galaxy-importer sets that variable to
# the ansible_collections directory itself, so a playbook importing one of this collection's
# own playbooks is reported missing. Allowed only when that playbook does exist.
SELF_IMPORT_FINDING = re.compile(
    rf"^WARNING: ERROR\s+Failed to find {NAMESPACE}\.{NAME}\.(\w+) playbook\.$")


def ansible_env(collections_path: Path, tmp: Path) -> dict[str, str]:
    """The environment for Ansible commands that must see only ``collections_path``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "GALAXY_IMPORTER_"))}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        ANSIBLE_COLLECTIONS_PATH=str(collections_path),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
        ANSIBLE_ROLES_PATH=str(tmp / "no-roles"),
        ANSIBLE_HOME=str(tmp / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
    )
    return env


def run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None,
        timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, (
        f"{shlex.join(proc.args)} exited {proc.returncode}\n"
        f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


def git_known_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return sorted(f for f in out.split("\0") if f and os.path.lexists(ROOT / f))


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether ``path`` or a directory above it matches one of galaxy.yml-style patterns."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatchcase(p, pat) for p in prefixes for pat in patterns)


def decoy_for(pattern: str) -> str:
    """A file that ``pattern`` excludes, for a pattern nothing in the copy matches."""
    name = re.sub(r"\[[^]]*\]|[*?]", "decoy", pattern)
    return name if name.endswith(".tar.gz") else f"{name}/decoy.txt"


@dataclass
class Release:
    tmp: Path
    src: Path            # copy of the files git knows, plus decoys for build_ignore
    galaxy: dict
    tarball: Path
    installed: Path      # collections path holding only the installed tarball
    decoys: list[str]
    importer: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        return ansible_env(self.installed, self.tmp)

    @property
    def install_dir(self) -> Path:
        return self.installed / "ansible_collections" / NAMESPACE / NAME


def snapshot_checkout() -> set[str]:
    """Paths in the checkout where a release step might leave output."""
    found = set()
    for base in (ROOT, ROOT / "build"):
        if base.is_dir():
            found |= {str(p.relative_to(ROOT)) for p in base.iterdir()}
    return found


@pytest.fixture(scope="module")
def checkout_before() -> set[str]:
    return snapshot_checkout()


@pytest.fixture(scope="module")
def release(request, tmp_path_factory, checkout_before) -> Iterator[Release]:
    tmp = tmp_path_factory.mktemp("release")
    src = tmp / "src"
    for rel in git_known_files():
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / rel).is_symlink():
            dest.symlink_to(os.readlink(ROOT / rel))
        else:
            shutil.copy2(ROOT / rel, dest)
    galaxy = yaml.safe_load((src / "galaxy.yml").read_text())

    # Local output that build_ignore must keep out (git ignores it, so the copy lacks it).
    decoys = []
    for pattern in galaxy.get("build_ignore", []) + MUST_NOT_SHIP:
        if not any(ignored(str(p.relative_to(src)), [pattern]) for p in src.rglob("*")):
            decoy = src / decoy_for(pattern)
            decoy.parent.mkdir(parents=True, exist_ok=True)
            decoy.write_text("must not be shipped\n")
            decoys.append(decoy_for(pattern))

    dist = tmp / "dist"
    ok(run([BIN / "ansible-galaxy", "collection", "build", src, "--output-path", dist],
           cwd=tmp, env=ansible_env(tmp / "none", tmp)))
    tarballs = list(dist.glob("*.tar.gz"))
    assert len(tarballs) == 1, tarballs

    installed = tmp / "installed"
    ok(run([BIN / "ansible-galaxy", "collection", "install", tarballs[0], "-p", installed],
           cwd=tmp, env=ansible_env(installed, tmp)))
    release = Release(tmp=tmp, src=src, galaxy=galaxy, tarball=tarballs[0],
                      installed=installed, decoys=decoys)
    # galaxy-importer takes most of this tier's time (its ansible-lint run): it starts now, in
    # the background, and test_galaxy_importer_accepts_the_tarball, near the end, waits for it.
    if any(item.originalname == "test_galaxy_importer_accepts_the_tarball"
           for item in request.session.items):
        release.importer = start_galaxy_importer(release)
    yield release
    if release.importer and release.importer.poll() is None:
        release.importer.kill()
        release.importer.wait()


def tar_files(tarball: Path) -> set[str]:
    with tarfile.open(tarball) as tf:
        return {m.name.removeprefix("./") for m in tf.getmembers() if not m.isdir()}


# --- the tarball ------------------------------------------------------------------------------

def test_tarball_name_and_manifest(release):
    version = release.galaxy["version"]
    assert release.tarball.name == f"{NAMESPACE}-{NAME}-{version}.tar.gz"
    with tarfile.open(release.tarball) as tf:
        manifest = json.load(tf.extractfile("MANIFEST.json"))
        files = json.load(tf.extractfile("FILES.json"))
    info = manifest["collection_info"]
    assert (info["namespace"], info["name"], info["version"]) == (NAMESPACE, NAME, version)
    for key in ("authors", "license", "readme", "repository", "tags", "description"):
        assert info[key] == release.galaxy[key], key
    listed = {f["name"] for f in files["files"] if f["ftype"] == "file"}
    assert listed == tar_files(release.tarball) - {"MANIFEST.json", "FILES.json"}


def test_tarball_leaves_out_build_ignore_and_local_output(release):
    shipped = tar_files(release.tarball)
    patterns = release.galaxy["build_ignore"]
    missing = [p for p in MUST_NOT_SHIP if not any(fnmatch.fnmatchcase(p, q) for q in patterns)]
    assert not missing, f"galaxy.yml build_ignore lacks {missing}"
    # Each pattern has something to exclude in the copy (a real file or a decoy).
    for pattern in patterns + MUST_NOT_SHIP:
        assert any(ignored(str(p.relative_to(release.src)), [pattern])
                   for p in release.src.rglob("*")), pattern
    assert ".venv/decoy.txt" in release.decoys  # git ignores .venv: the copy had none
    leaked = sorted(f for f in shipped if ignored(f, patterns + MUST_NOT_SHIP))
    assert not leaked, f"shipped despite build_ignore: {leaked}"
    assert not any(f.startswith(".git/") for f in shipped)
    assert "galaxy.yml" not in shipped  # MANIFEST.json replaces it


def test_tarball_ships_the_collection_content(release):
    shipped = tar_files(release.tarball)
    expected = {f for f in git_known_files()
                if ignored(f, MUST_SHIP) and not f.endswith(".pyc")
                and not ignored(f, release.galaxy["build_ignore"])}
    assert not expected - shipped, f"not shipped: {sorted(expected - shipped)}"
    for required in ("meta/runtime.yml", "meta/execution-environment.yml", "README.md",
                     "LICENSE", "changelogs/changelog.yaml", "changelogs/config.yaml"):
        assert required in shipped, required
    assert any(f.startswith("docs/") for f in shipped)
    for kind, pattern in (("module", "plugins/modules/*.py"), ("role", "roles/*/tasks/main.yml"),
                          ("playbook", "playbooks/*.yml")):
        found = [f for f in shipped if fnmatch.fnmatchcase(f, pattern)]
        assert found, f"no {kind} in the tarball"


# --- the installed copy -------------------------------------------------------------------------

def returned_names(py: Path, method: str) -> set[str]:
    """The string keys of the dict literal that ``method`` returns in ``py``."""
    tree = ast.parse(py.read_text(), filename=str(py))
    return {
        key.value
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef) and func.name == method
        for ret in ast.walk(func) if isinstance(ret, ast.Return)
        and isinstance(ret.value, ast.Dict)
        for key in ret.value.keys if isinstance(key, ast.Constant)
    }


def plugin_names(doc_type: str, directory: Path) -> set[str]:
    """The plugins of one type that the files define, by short name.

    Filter and test plugin files each define several, in the dict their ``filters()`` or
    ``tests()`` method returns; each is documented by ``<name>.yml`` beside them.
    """
    files = [p for p in sorted(directory.glob("*.py")) if p.name != "__init__.py"]
    if doc_type not in ("filter", "test"):
        return {p.stem for p in files}
    method = "filters" if doc_type == "filter" else "tests"
    return set().union(*(returned_names(py, method) for py in files))


def doc_targets() -> list[tuple[str, set[str]]]:
    """(ansible-doc type, short names) for every documented plugin type and for roles."""
    targets = []
    for directory in sorted(p for p in (ROOT / "plugins").iterdir() if p.is_dir()):
        if directory.name in UNDOCUMENTED_PLUGIN_DIRS or directory.name == "__pycache__":
            continue
        doc_type = PLUGIN_DOC_TYPES.get(directory.name)
        if doc_type is None:  # a new plugin directory this test does not know how to check
            targets.append((f"unknown:{directory.name}", set()))
            continue
        targets.append((doc_type, plugin_names(doc_type, directory)))
    roles = {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()}
    targets.append(("role", roles))
    return targets


DOC_TARGETS = doc_targets()


def test_plugin_directories_are_known():
    types = [doc_type for doc_type, names in DOC_TARGETS]
    unknown = [t for t in types if t.startswith("unknown:")]
    assert not unknown, f"plugins/ directories this test cannot document-check: {unknown}"
    assert set(types) >= {"module", "inventory", "filter", "role"}


def test_every_filter_and_test_plugin_has_a_doc_file():
    directories = [d for d in ("filter", "test") if (ROOT / "plugins" / d).is_dir()]
    assert "filter" in directories
    for directory in directories:
        path = ROOT / "plugins" / directory
        method = "filters" if directory == "filter" else "tests"
        for py in path.glob("*.py"):
            if py.name != "__init__.py":
                assert returned_names(py, method), f"{py}: no {method}() returning a dict literal"
        names = plugin_names(directory, path)
        docs = {p.stem for p in path.glob("*.y*ml")}
        assert names == docs, (f"without a doc file: {sorted(names - docs)}; "
                               f"doc files of no {directory} plugin: {sorted(docs - names)}")


@pytest.mark.parametrize(("doc_type", "names"), [t for t in DOC_TARGETS
                                                 if not t[0].startswith("unknown:")],
                         ids=[t[0] for t in DOC_TARGETS if not t[0].startswith("unknown:")])
def test_ansible_doc_renders_everything_from_the_installed_copy(release, doc_type, names):
    assert names, f"no {doc_type} found in the files"
    expected = sorted(f"{FQ}.{n}" for n in names)
    env, cwd = release.env, release.tmp

    listing = ok(run([BIN / "ansible-doc", "-t", doc_type, "-l", FQ, "--json"], cwd=cwd, env=env))
    assert listing.stderr.strip() == "", listing.stderr
    assert sorted(json.loads(listing.stdout)) == expected

    text = ok(run([BIN / "ansible-doc", "-t", doc_type, *expected], cwd=cwd, env=env))
    assert text.stderr.strip() == "", f"ansible-doc -t {doc_type}:\n{text.stderr}"
    headers = re.findall(r"^> [A-Z]+:? \*?([^\s*]+)\*? \((.*)\)$", ANSI.sub("", text.stdout),
                         re.MULTILINE)
    assert sorted(name for name, path in headers) == expected
    for name, path in headers:
        assert Path(path).is_relative_to(release.install_dir), (name, path)

    data = json.loads(ok(run([BIN / "ansible-doc", "-t", doc_type, "--json", *expected],
                             cwd=cwd, env=env)).stdout)
    assert sorted(data) == expected
    for name, doc in data.items():
        if doc_type == "role":
            short = name.rsplit(".", 1)[1]
            specs = yaml.safe_load((ROOT / "roles" / short / "meta" / "argument_specs.yml")
                                   .read_text())["argument_specs"]
            assert set(doc["entry_points"]) == set(specs), name
            for entry, spec in doc["entry_points"].items():
                assert spec.get("short_description"), (name, entry)
        else:
            assert doc["doc"]["short_description"], name
            assert doc["doc"]["description"], name
            assert Path(doc["doc"]["filename"]).is_relative_to(release.install_dir), name


def test_action_plugins_have_module_docs():
    actions = {p.stem for p in (ROOT / "plugins" / "action").glob("*.py")
               if p.name != "__init__.py"}
    modules = {p.stem for p in (ROOT / "plugins" / "modules").glob("*.py")}
    assert actions <= modules, f"action plugins with no documented module: {actions - modules}"


def test_every_playbook_loads_from_the_installed_copy(release):
    names = sorted(p.stem for p in (ROOT / "playbooks").glob("*.y*ml"))
    assert names
    proc = ok(run([BIN / "ansible-playbook", "--syntax-check", "-i", "localhost,",
                   *(f"{FQ}.{n}" for n in names)], cwd=release.tmp, env=release.env))
    loaded = re.findall(r"^playbook: (.*)$", proc.stdout, re.MULTILINE)
    assert [Path(p).stem for p in loaded] == names
    for path in loaded:
        assert Path(path).is_relative_to(release.install_dir / "playbooks"), path
    # Plays on groups that add_host fills at run time find no host in a syntax check: fine.
    other = [line for line in ANSI.sub("", proc.stderr).splitlines() if line.strip()
             and not re.match(r"^\[WARNING\]: Could not match supplied host pattern, ignoring:",
                              line)]
    assert not other, "\n".join(other)


# --- the execution environment ------------------------------------------------------------------

@pytest.fixture(scope="module")
def ee_context(release) -> Path:
    """``ansible-builder create`` run on the copy, with the tarball where ``make ee`` puts it."""
    staged = release.src / "build" / "ee" / f"{NAMESPACE}-{NAME}.tar.gz"
    staged.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(release.tarball, staged)
    context = release.tmp / "ee-context"
    proc = ok(run([BIN / "ansible-builder", "create",
                   "-f", release.src / "execution-environment.yml",
                   "--context", context, "--output-filename", "Containerfile", "-v3"],
                  cwd=release.tmp, env=ansible_env(release.tmp / "none", release.tmp)))
    out = proc.stdout + proc.stderr
    assert "No matches" not in out and "does not exist" not in out, out
    return context


def final_stage(containerfile: str) -> list[str]:
    lines = containerfile.splitlines()
    return lines[lines.index("FROM base AS final"):]


def test_ee_definition_matches_the_collection_metadata():
    ee = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    meta = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    assert ee["version"] == 3
    assert meta["version"] == 1
    # One list of Python and one of system packages, used by both.
    assert ee["dependencies"]["python"] == meta["dependencies"]["python"]
    assert ee["dependencies"]["system"] == meta["dependencies"]["system"]
    core = Requirement(ee["dependencies"]["ansible_core"]["package_pip"])
    assert core.name == "ansible-core"
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    requires = SpecifierSet(runtime["requires_ansible"])
    for version in ("2.19.0", "2.19.14"):
        assert version in core.specifier and version in requires, version
    for version in ("2.18.9", "2.20.0"):
        assert version not in core.specifier, version


def test_ee_containerfile(release, ee_context):
    containerfile = (ee_context / "Containerfile").read_text()
    args = dict(re.findall(r'^ARG (\w+)="(.*)"$', containerfile, re.MULTILINE))

    image = args["EE_BASE_IMAGE"]
    assert image.split("/", 1)[0] in PUBLIC_REGISTRIES, image

    # ansible-core 2.19 and ansible-runner, on a RUN line where the shell splits the value:
    # each word must be a requirement (a `<` or `>` would become a redirection).
    words = shlex.split(args["ANSIBLE_INSTALL_REFS"])
    assert not any(set(w) & set("<>|;&$`") for w in words), words
    reqs = {r.name: r for r in map(Requirement, words)}
    assert set(reqs) == {"ansible-core", "ansible-runner"}
    assert "2.19.1" in reqs["ansible-core"].specifier
    assert "2.20.0" not in reqs["ansible-core"].specifier
    assert "RUN $PYCMD -m pip install --no-cache-dir $ANSIBLE_INSTALL_REFS" in containerfile

    # The galaxy stage installs the requirements file copied into /build.
    galaxy = containerfile[containerfile.index("FROM base AS galaxy"):
                           containerfile.index("FROM base AS builder")]
    assert "COPY _build /build" in galaxy and "WORKDIR /build" in galaxy
    assert re.search(r"^RUN .*ansible-galaxy collection install .*-r requirements\.yml "
                     r'--collections-path "/usr/share/ansible/collections"$', galaxy, re.MULTILINE)
    final = final_stage(containerfile)
    assert "COPY --from=galaxy /usr/share/ansible /usr/share/ansible" in final
    assert "RUN /output/scripts/install-from-bindep && rm -rf /output/wheels" in final


def test_ee_context_requirements(ee_context):
    build = ee_context / "_build"
    python = {Requirement(line).name.lower()
              for line in (build / "requirements.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    assert python >= {"boto3", "botocore", "google-auth", "requests", "jmespath", "pyyaml",
                      "ansible-runner"}

    from bindep.depends import Depends
    bindep = Depends((build / "bindep.txt").read_text())
    rpm = {r[0] for r in bindep.active_rules(["platform:rpm", "platform:redhat",
                                              "platform:fedora"])}
    dpkg = {r[0] for r in bindep.active_rules(["platform:dpkg", "platform:debian"])}
    assert {"openssh-clients", "rsync"} <= rpm
    assert {"openssh-client", "rsync"} <= dpkg


def test_ee_galaxy_and_builder_stages_replayed(release, ee_context):
    """The build's own steps, run here on the context: the collection installs from it, and the
    builder stage's introspection yields our Python and system packages."""
    build = ee_context / "_build"
    collections = release.tmp / "ee-collections"
    env = ansible_env(collections, release.tmp)
    env["ANSIBLE_GALAXY_DISABLE_GPG_VERIFY"] = "1"
    # Galaxy stage: `WORKDIR /build` then the install from requirements.yml.
    ok(run([BIN / "ansible-galaxy", "collection", "install", "-r", "requirements.yml",
            "--collections-path", collections], cwd=build, env=env))
    manifest = json.loads((collections / "ansible_collections" / NAMESPACE / NAME /
                           "MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == release.galaxy["version"]

    # Builder stage: introspection of the installed collections (our meta/execution-environment.yml
    # as shipped), first alone (what any EE including this collection gets), then with the
    # definition's own files, as the Containerfile runs it.
    script = build / "scripts" / "introspect.py"
    alone = ok(run([sys.executable, script, "introspect", "--sanitize", collections],
                   cwd=build, env=env))
    data = yaml.safe_load(alone.stdout.split("\n", 1)[1])
    from_collection = {Requirement(line.split("#")[0]).name.lower() for line in data["python"]}
    assert from_collection >= {"boto3", "botocore", "google-auth", "requests", "jmespath"}
    assert all(f"from collection {FQ}" in line for line in data["python"] + data["system"])

    pip_out, bindep_out = release.tmp / "ee-requirements.txt", release.tmp / "ee-bindep.txt"
    ok(run([sys.executable, script, "introspect", collections,
            "--user-pip=requirements.txt", "--user-bindep=bindep.txt",
            f"--write-pip={pip_out}", f"--write-bindep={bindep_out}"], cwd=build, env=env))
    merged = {Requirement(line.split("#")[0]).name.lower()
              for line in pip_out.read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    assert merged >= {"boto3", "botocore", "google-auth", "requests", "jmespath",
                      "ansible-runner"}
    from bindep.depends import Depends
    rpm = {r[0] for r in Depends(bindep_out.read_text()).active_rules(["platform:rpm"])}
    assert {"openssh-clients", "rsync"} <= rpm

    # Final stage: the definition's own checks (`RUN ansible...` lines) pass on that install.
    checks = [line.removeprefix("RUN ") for line in
              final_stage((ee_context / "Containerfile").read_text())
              if line.startswith("RUN ansible")]
    assert checks
    for check in checks:
        ok(run(["sh", "-c", check], cwd=release.tmp, env=env))


# --- Galaxy's import ------------------------------------------------------------------------------

IMPORTER_TIMEOUT = 900  # a hang guard only: see galaxy_importer_unlimited.py


def importer_dir(release: Release) -> Path:
    return release.tmp / "importer"


def start_galaxy_importer(release: Release) -> subprocess.Popen:
    work = importer_dir(release)
    work.mkdir()
    config = work / "galaxy-importer.cfg"
    config.write_text(
        "[galaxy-importer]\n"
        "RUN_ANSIBLE_TEST = False\n"       # ansible-test sanity: `make sanity`
        "RUN_ANSIBLE_LINT = True\n"
        "RUN_ANSIBLE_DOC = True\n"
        "CHECK_CHANGELOG = True\n"
        "CHECK_REQUIRED_TAGS = True\n"
        f"ANSIBLE_LOCAL_TMP = {work / 'ansible-tmp'}\n"
        f"TMP_ROOT_DIR = {work}\n")
    env = ansible_env(release.tmp / "none", release.tmp)
    env["GALAXY_IMPORTER_CONFIG"] = str(config)
    with open(work / "stdout", "w") as out, open(work / "stderr", "w") as err:
        return subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("galaxy_importer_unlimited.py")),
             str(release.tarball)],
            cwd=work, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)


def test_galaxy_importer_accepts_the_tarball(release):
    work = importer_dir(release)
    rc = release.importer.wait(timeout=IMPORTER_TIMEOUT)
    stdout, stderr = (work / "stdout").read_text(), (work / "stderr").read_text()
    assert rc == 0, f"galaxy-importer exited {rc}\n{stdout[-4000:]}\n{stderr[-4000:]}"
    lines = [line.rstrip() for line in stdout.splitlines() if line.strip()]
    assert "Importer processing completed successfully" in lines, stdout[-4000:]

    playbooks = {p.stem for p in (ROOT / "playbooks").glob("*.y*ml")}
    problems = []
    for line in lines:
        if not line.startswith(("WARNING:", "ERROR:", "CRITICAL:")):
            continue
        known = SELF_IMPORT_FINDING.match(line)
        if known and known.group(1) in playbooks:
            continue
        problems.append(line)
    assert not problems, "galaxy-importer reported:\n" + "\n".join(problems)
    assert stderr.strip() == "", stderr[-4000:]

    result = json.loads((work / "importer_result.json").read_text())
    assert result["metadata"]["version"] == release.galaxy["version"]
    assert re.fullmatch(r">=\d+\.\d+\.\d+", result["requires_ansible"]), result["requires_ansible"]
    found: dict[str, set[str]] = {}
    for content in result["contents"]:
        found.setdefault(content["content_type"], set()).add(content["name"])
    for doc_type, names in DOC_TARGETS:
        assert names <= found.get(doc_type, set()), (doc_type, names - found.get(doc_type, set()))
    docs = {(c["content_type"], c["content_name"]): c
            for c in result["docs_blob"]["contents"]}
    for doc_type, names in DOC_TARGETS:
        if doc_type == "role":
            continue
        for name in names:
            blob = docs.get((doc_type, name))
            assert blob and blob["doc_strings"], (
                f"galaxy-importer found no docs for {doc_type} {name}")
    assert result["docs_blob"]["collection_readme"]["html"]


# --- and nothing left behind --------------------------------------------------------------------

def test_checkout_left_clean(release, ee_context, checkout_before):
    """Runs last (file order): none of the release steps' output appeared in the checkout."""
    new = snapshot_checkout() - checkout_before
    artifacts = [p for p in new if p in ("context", "importer_result.json", "build/ee")
                 or fnmatch.fnmatchcase(p, "*.tar.gz") or fnmatch.fnmatchcase(p, "*.cfg")]
    assert not artifacts, artifacts
