# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An Arvados release as an operator writes it: '3.2', '2.7.4', or a package's '2.7.4-1'.

Pure Python (3.8+), standard library only. The one parser of a release: the dispatcher's
settings (``dispatcher_config_arvados_version``) and the reconciliation's
``arvados_version`` read it the same way, each refusing with its own option's message.
"""

from __future__ import annotations

import re
from typing import Any, Tuple

from .errors import ConfigError

# A Debian package's version may go on after the release: '-1', '~bpo12+1', '+deb12u1'.
RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:[-~+].*)?\Z", re.ASCII)

Release = Tuple[int, int, int]


def parse_release(text: Any, refusal: str) -> Release:
    """(major, minor, patch) of `text` (surrounding blanks ignored); a ConfigError saying
    `refusal`, with the text given in place of its ``%r``, when it names no release."""
    match = RELEASE.match(str(text).strip())
    if not match:
        raise ConfigError(refusal % (text,))
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
