# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a fake connection's execute returns: the rows of a result, read as the engines
read a driver's cursor (fetchone, fetchall, iteration)."""

from __future__ import annotations


class Rows:
    def __init__(self, rows):
        self.rows = list(rows)

    def fetchone(self):
        return self.rows[0]

    def fetchall(self):
        return self.rows

    def __iter__(self):
        return iter(self.rows)
