# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Let ``ansible-test sanity --venv`` bootstrap pip where only the package index is reachable.

ansible-test creates its virtual environments without pip and installs pip into them with a
bootstrap script it downloads from ci-files.testing.ansible.com and caches as
``~/.ansible/test/cache/get_pip_<version>.py``. Behind a firewall that lets only the package
index through, that download fails and no sanity test can run.

``python tests/sanity/pip_bootstrap.py install`` (run by ``make sanity``) makes sure the cached
script exists: it tries the official download first and, only if that fails, caches this file
in its place. Run as that cached script, this file does what the official one does: it installs
the requested pip into the running interpreter, using the pip wheel bundled with ``ensurepip``
to fetch it from the package index.
"""

from __future__ import annotations

import glob
import os
import runpy
import shutil
import sys
import types
import urllib.request

OFFICIAL_URL = "https://ci-files.testing.ansible.com/ansible-test/get-pip-%s.py"
# Options ansible-test passes for get-pip.py that pip install itself does not know.
GET_PIP_ONLY_OPTIONS = ("--no-setuptools", "--no-wheel")


def cache_path(pip_version):
    name = "get_pip_%s.py" % pip_version.replace(".", "_")
    return os.path.join(os.path.expanduser("~/.ansible/test/cache"), name)


def wanted_pip_version():
    """The pip version this ansible-test bootstraps into its virtual environments."""
    # pylint: disable-next=import-outside-toplevel
    from ansible_test._internal.python_requirements import get_venv_packages

    python = types.SimpleNamespace(version="%d.%d" % sys.version_info[:2])
    return get_venv_packages(python)["pip"]


def install():
    """Cache a pip bootstrap script for ansible-test unless one is cached already."""
    version = wanted_pip_version()
    target = cache_path(version)
    if os.path.exists(target):
        return 0
    os.makedirs(os.path.dirname(target), exist_ok=True)
    partial = target + ".download"
    try:
        with urllib.request.urlopen(OFFICIAL_URL % version, timeout=15) as response:
            with open(partial, "wb") as handle:
                shutil.copyfileobj(response, handle)
        os.replace(partial, target)
        print("cached the official pip %s bootstrap script: %s" % (version, target))
    except OSError as exc:
        if os.path.exists(partial):
            os.unlink(partial)
        shutil.copyfile(os.path.abspath(__file__), target)
        print(
            "could not download the pip bootstrap script (%s); cached a stand-in that installs "
            "pip %s from the package index: %s" % (exc, version, target)
        )
    return 0


def bootstrap(args):
    """Install pip into this interpreter: ``get-pip.py``'s job, given its arguments."""
    pip_args = [arg for arg in args if arg not in GET_PIP_ONLY_OPTIONS]
    bundled = sorted(
        glob.glob(os.path.join(os.path.dirname(_ensurepip_file()), "_bundled", "pip-*.whl"))
    )
    if not bundled:
        print("pip bootstrap: ensurepip has no bundled pip wheel in this Python", file=sys.stderr)
        return 1
    # pip runs from its wheel, as ensurepip does it, and installs the requested pip for real.
    sys.path.insert(0, bundled[-1])
    sys.argv = ["pip", "install", "--upgrade", "--force-reinstall"] + pip_args
    try:
        runpy.run_module("pip", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code or 0
    return 0


def _ensurepip_file():
    import ensurepip  # pylint: disable=import-outside-toplevel

    return ensurepip.__file__


def main(argv):
    if argv[:1] == ["install"]:
        return install()
    return bootstrap(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
