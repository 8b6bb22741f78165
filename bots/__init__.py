"""Chat platform adapters over the Runner interface."""
