# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every gpufleet.cluster module reports an error: one context manager around its work.

    with fail_json_on_error(module):
        record, changed = apply.apply(...)
    module.exit_json(changed=changed, fleet=record)

A GpufleetError (a problem the user can fix; its message says what to do) becomes
``module.fail_json(msg=str(exc))``. Anything else is a bug in gpufleet and becomes the
"internal error in gpufleet (please report it): ..." failure with the traceback under
``exception``. ``module.fail_json`` and ``module.exit_json`` called inside the block end the
module as usual (they raise SystemExit, which is no Exception).

Modules import this with the absolute ``ansible_collections.gpufleet.cluster`` path so that
AnsiballZ ships it with them. Pure Python: it only calls the module object it is given.
"""

from __future__ import annotations

import contextlib
import traceback
from typing import Any, Iterator

from .errors import GpufleetError

INTERNAL_ERROR = "internal error in %s (please report it): %s"


def state_options(backend_settings: bool = False) -> dict[str, dict[str, str]]:
    """The argument spec of the options several modules share, declared once as they are
    documented once (doc_fragments/state.py): ``state_dir`` and, with ``backend_settings``, the
    cloud backends' settings. A new dict each call, so no module changes another's spec."""
    options = dict(state_dir=dict(type="path"))
    if backend_settings:
        options["backend_settings"] = dict(type="dict")
    return options


def failure(exc: BaseException, prefix: str = "", problems: bool = False,
            extras: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``fail_json`` arguments for a GpufleetError: its message after ``prefix``, then
    ``extras``, and with ``problems`` the config model's list of problems when the error has one
    (SpecError.as_dicts)."""
    result: dict[str, Any] = dict(msg=prefix + str(exc))
    if problems and hasattr(exc, "as_dicts"):
        result["problems"] = exc.as_dicts()
    result.update(extras or {})
    return result


@contextlib.contextmanager
def fail_json_on_error(module: Any, what: str = "gpufleet", prefix: str = "",
                       problems: bool = False,
                       extras: dict[str, Any] | None = None) -> Iterator[None]:
    """Run the block; fail the module on any exception it raises.

    ``what`` names the code in the internal-error message ("gpufleet preflight", ...);
    ``prefix`` goes before a GpufleetError's message; ``problems`` adds a SpecError's problems;
    ``extras`` (a dict, read when the error happens, so lists the block fills show what it did)
    adds keys to the failure of a GpufleetError.
    """
    try:
        yield
    except GpufleetError as exc:
        module.fail_json(**failure(exc, prefix, problems, extras))
    except Exception as exc:  # pylint: disable=broad-exception-caught
        module.fail_json(msg=INTERNAL_ERROR % (what, exc), exception=traceback.format_exc())
