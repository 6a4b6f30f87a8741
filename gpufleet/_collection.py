"""Find the gpufleet.cluster collection this command belongs to and make it importable.

The command ships inside the collection's checkout (``gpufleet/`` beside ``galaxy.yml``). Ansible
and Python both need the collection at ``<dir>/ansible_collections/gpufleet/cluster``; when the
checkout is not already laid out that way, a symlink tree under the user's cache directory
provides that path. ``GPUFLEET_COLLECTIONS_PATH`` overrides the lookup.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

NAMESPACE = "gpufleet"
NAME = "cluster"


class CollectionNotFound(RuntimeError):
    pass


def collection_root() -> Path:
    """The directory holding galaxy.yml for the collection this package was loaded from."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "galaxy.yml").is_file():
        raise CollectionNotFound(
            "the gpufleet command must run from a gpufleet.cluster checkout (no galaxy.yml in "
            f"{root}); install it with 'pip install -e <checkout>' or set GPUFLEET_COLLECTIONS_PATH"
        )
    return root


def collections_path() -> Path:
    """A directory D such that D/ansible_collections/gpufleet/cluster is this collection."""
    override = os.environ.get("GPUFLEET_COLLECTIONS_PATH")
    if override:
        return Path(override)
    root = collection_root()
    if root.parts[-3:] == ("ansible_collections", NAMESPACE, NAME):
        return root.parents[2]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    base = cache / "gpufleet" / "collections" / digest
    link = base / "ansible_collections" / NAMESPACE / NAME
    if not (link.is_symlink() and link.resolve() == root):
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".{NAME}.{os.getpid()}")
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(root, target_is_directory=True)
        os.replace(tmp, link)
    return base


def ensure_importable() -> Path:
    """Put the collections path on sys.path so ``ansible_collections.gpufleet.cluster`` imports."""
    path = collections_path()
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    return path


def config_model():
    """The collection's config model: the package plugins/module_utils/spec, imported."""
    ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils import spec as module

    return module


def errors():
    """The collection's root error (plugins/module_utils/core/errors): ``errors().GpufleetError``
    is the class every error of the collection derives from, gpufleet.api's included."""
    ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core import errors as module

    return module


def text():
    """The collection's helpers for quoting user input in messages, shortened
    (plugins/module_utils/core/text)."""
    ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core import text as module

    return module
