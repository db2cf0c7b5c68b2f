"""Plans and runs the condensation passes for one request of one session."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxwarden.config import EngineConfig
from ctxwarden.model.conversation import Conversation
from ctxwarden.store.base import Store
from ctxwarden.tokens.budget import Budget
from ctxwarden.tokens.counter import TokenCounter
from ctxwarden.tokens.registry import CachePricing

__all__ = ["CondenseOutcome", "Condenser"]


@dataclass(frozen=True, slots=True)
class CondenseOutcome:
    """The condensed conversation (the same object when nothing changed) and counters."""

    conversation: Conversation
    report: dict[str, Any] = field(default_factory=dict)


class Condenser:
    """Runs the configured pipeline (pass-through until passes are configured)."""

    def __init__(self, config: EngineConfig, store: Store) -> None:
        self.config = config
        self.store = store

    def run(
        self,
        conversation: Conversation,
        *,
        budget: Budget,
        counter: TokenCounter,
        session: str,
        tenant: str,
        pricing: CachePricing,
    ) -> CondenseOutcome:
        return CondenseOutcome(conversation)
