"""Model-relative budgets: window selection, pressure and bands.

Window selection order: explicit configuration, registry, observed usage,
conservative fallback; :attr:`Budget.window_source` says which one was used.

``pressure = used / max(1, window - output_reserve)``. Compaction thresholds follow
seed 002: the hard trigger is ``min(window - reserve, quality_cap * window)`` with a
quality cap of 88% (85% for windows of 200k and more); the soft trigger is
``max(0.7 * hard, hard - 5% of window)``, kept at least 2,048 tokens below hard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BANDS", "Band", "Budget", "WindowSource", "make_budget"]

WindowSource = Literal["config", "registry", "observed", "fallback"]
Band = Literal["low", "moderate", "elevated", "soft", "hard"]
BANDS: tuple[Band, ...] = ("low", "moderate", "elevated", "soft", "hard")

_MIN_MARGIN = 2048


@dataclass(frozen=True, slots=True)
class Budget:
    """The token budget of one request's model."""

    context_window: int
    output_reserve: int
    window_source: WindowSource

    @property
    def usable(self) -> int:
        return max(1, self.context_window - self.output_reserve)

    @property
    def hard_trigger(self) -> int:
        cap = 0.85 if self.context_window >= 200_000 else 0.88
        return max(1, min(self.usable, int(cap * self.context_window)))

    @property
    def soft_trigger(self) -> int:
        hard = self.hard_trigger
        soft = max(int(0.7 * hard), hard - int(0.05 * self.context_window))
        return max(1, min(soft, hard - _MIN_MARGIN))

    def pressure(self, used: int) -> float:
        return used / self.usable

    def band(self, used: int) -> Band:
        """``low`` < 40% of usable <= ``moderate`` < 60% <= ``elevated`` < soft <= ``soft``
        < hard <= ``hard``."""
        if used >= self.hard_trigger:
            return "hard"
        if used >= self.soft_trigger:
            return "soft"
        p = self.pressure(used)
        if p >= 0.6:
            return "elevated"
        if p >= 0.4:
            return "moderate"
        return "low"


def make_budget(
    *,
    configured_window: int | None,
    configured_reserve: int | None,
    registry_window: int | None,
    registry_reserve: int | None,
    observed_tokens: int | None,
    fallback_window: int,
    fallback_reserve: int,
) -> Budget:
    """Choose the window by the documented order and build the budget.

    A reserve that does not fit the chosen window (the registry's reserve for a model
    given a small window in the config, or a configured reserve past the model's
    window) is cut to a quarter of the window: left as it is, every request would be
    over the hard trigger and force a compaction step. A configured window keeps a
    registry reserve only when it leaves at least half the window."""
    reserve = configured_reserve if configured_reserve is not None else registry_reserve
    if reserve is None:
        reserve = fallback_reserve
    window: int
    source: WindowSource
    if configured_window is not None:
        window, source = configured_window, "config"
    elif registry_window is not None:
        window, source = registry_window, "registry"
    elif observed_tokens is not None and observed_tokens > fallback_window:
        window, source = observed_tokens, "observed"
    else:
        window, source = fallback_window, "fallback"
    borrowed = configured_window is not None and configured_reserve is None
    if reserve >= window or (borrowed and reserve > window // 2):
        reserve = window // 4
    return Budget(window, reserve, source)
