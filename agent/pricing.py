"""Model prices (agent/pricing.yaml) and what a number of tokens costs. One file of figures, read by
the eval reports and, later, the metrics dashboard."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from agent.metrics import TOKEN_TYPES

PRICING_FILE = Path(__file__).resolve().parent / "pricing.yaml"


class PricingError(Exception):
    """The pricing file is missing or malformed."""


class Price(BaseModel, frozen=True):
    """US dollars per million tokens, by token type."""

    input: float
    output: float
    cache_read: float
    cache_creation: float

    def cost(self, tokens: Mapping[str, int]) -> float:
        """Dollars for token counts keyed by type (input, output, cache_read, cache_creation)."""
        return sum(getattr(self, kind) * tokens.get(kind, 0) for kind in TOKEN_TYPES) / 1_000_000


class PriceList(BaseModel, frozen=True):
    models: dict[str, Price]

    def price(self, model: str) -> Price | None:
        """The model's price; a dated id (claude-x-4-5-20250929) falls back to the longest listed prefix. A
        list (`a,b`) is priced as its first model; `anthropic:` is the default provider and names no other price."""
        model = model.split(",")[0].strip().removeprefix("anthropic:")
        if model in self.models:
            return self.models[model]
        prefixes = [name for name in self.models if model.startswith(f"{name}-")]
        return self.models[max(prefixes, key=len)] if prefixes else None

    def cost(self, model: str, tokens: Mapping[str, int]) -> float | None:
        price = self.price(model)
        return None if price is None else price.cost(tokens)


@cache
def load_pricing(path: Path = PRICING_FILE) -> PriceList:
    try:
        return PriceList.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise PricingError(f"{path}: {str(exc).splitlines()[0]}") from None
