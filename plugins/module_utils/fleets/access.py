# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which fleets this controller may reach, told without SSH (issue 34).

A stand-in until the backends' labels and tags carry the members' fingerprints: ``publish``
records nothing yet and says so by returning False.
"""

from __future__ import annotations

from typing import Any, Optional


def publish(record: Any, user: str, fingerprint: Optional[str], docker: Any = None,
            root: Optional[str] = None, settings: Optional[dict] = None) -> bool:
    """Publish ``user``'s key fingerprint (None: take it away) on the fleet's backend;
    True when something was written."""
    return False
