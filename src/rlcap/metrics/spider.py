"""SPIDEr (Liu et al., [Liu17]): the mean of CIDEr-D and SPICE."""

from __future__ import annotations


def spider(cider_d: float, spice: float) -> float:
    return 0.5 * (cider_d + spice)
