# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who creates a fleet's instances: the user name this controller goes by
(teams.identity.user_name), which every new instance carries (the local label
``gpufleet.creator``, the EC2 tag ``gpufleet:creator``, the Compute Engine label
``gpufleet-creator``). fleets/access.py reads it to tell this user's own fleet whose key is
gone from another user's fleet, which this controller was never meant to reach."""

from __future__ import annotations

from ..teams import identity


def creator_name() -> str | None:
    """This controller's user name, or None when it has no valid one (the instances then
    carry no creator, as those made before the label existed)."""
    try:
        return identity.user_name()
    except identity.IdentityError:
        return None
