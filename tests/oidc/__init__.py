"""A real OpenID Connect provider (panva's oidc-provider on Node.js) for the sign-in tests: tests/oidc/provider.py."""
