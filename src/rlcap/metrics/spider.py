"""SPIDEr (Liu et al., ../shared/papers/001_ce1e9980f3932db2.txt): the mean of CIDEr-D and SPICE."""

from __future__ import annotations


def spider(cider_d: float, spice: float) -> float:
    return 0.5 * (cider_d + spice)
