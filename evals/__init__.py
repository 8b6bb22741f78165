"""Eval suites run from the CLI against the Runner interface."""
