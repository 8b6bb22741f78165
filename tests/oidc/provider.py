"""A real OpenID Connect provider for the sign-in tests: panva's certified `oidc-provider` (npm), run by
Node.js from tests/oidc/provider.mjs, so the web app's sign-in meets an implementation it did not write.

    with running_provider() as provider:            # or the `oidc_provider` fixture (tests/conftest.py)
        client = provider.register_client(f"{app_url}/auth/callback")
        # AGENT_OIDC_ISSUER=provider.issuer, AGENT_OIDC_CLIENT_ID=client.client_id, ...

Each test registers a confidential client of its own (its redirect URI is the app under test's, known only
once that app has a port) through the provider's Dynamic Client Registration endpoint (RFC 7591). The
provider's development login page signs anybody in: login "alice" is alice@example.com, verified, in the
groups provider.mjs lists (PEOPLE).

Without Node.js, npm or the packages (`npm ci` offline) the tests that need it skip and say why; in CI
(`CI` set, as .ci/run sets it) they fail instead, since .ci/run installs all three.
"""

from __future__ import annotations

import fcntl
import html
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import pytest

HERE = Path(__file__).parent
SCRIPT = HERE / "provider.mjs"
PACKAGE = HERE / "node_modules" / "oidc-provider"
PEOPLE_GROUPS = {"alice": ["analysts", "ewr"], "bob": ["analysts", "jfk"], "carol": ["admins"]}  # as provider.mjs


@dataclass(frozen=True)
class OidcClient:
    client_id: str
    client_secret: str
    redirect_uri: str


@dataclass(frozen=True)
class OidcProvider:
    issuer: str

    def register_client(self, redirect_uri: str) -> OidcClient:
        """A new confidential client (client_secret_basic, code flow) allowed to return to `redirect_uri`."""
        metadata = {
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_basic",
            "application_type": "web",
        }
        response = httpx.post(f"{self.issuer}/reg", json=metadata, timeout=30)
        response.raise_for_status()
        registered = response.json()
        return OidcClient(registered["client_id"], registered["client_secret"], redirect_uri)


def unavailable(reason: str) -> None:
    """Skip, saying why; in CI, where .ci/run installs Node.js and the packages, fail instead."""
    if os.environ.get("CI"):
        pytest.fail(f"the OpenID Connect provider is needed in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def install_packages() -> None:
    """`npm ci` once (the lock file pins oidc-provider), whichever xdist worker gets here first."""
    if PACKAGE.is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        unavailable("no npm found to install oidc-provider (install Debian's nodejs and npm)")
    with open(HERE / ".npm-ci.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing: wait for it
        if PACKAGE.is_dir():
            return
        done = subprocess.run(
            [str(npm), "ci", "--no-audit", "--no-fund"], cwd=HERE, capture_output=True, text=True, timeout=300
        )
    if done.returncode != 0 or not PACKAGE.is_dir():
        unavailable(f"`npm ci` in tests/oidc failed (offline?): {done.stderr.strip()[-500:]}")


@contextmanager
def running_provider(timeout_s: float = 60.0) -> Iterator[OidcProvider]:
    """The provider on a free loopback port, until the block ends."""
    node = shutil.which("node")
    if node is None:
        unavailable("no Node.js found to run oidc-provider (install Debian's nodejs and npm)")
    install_packages()
    with tempfile.TemporaryFile() as log:  # its warnings, shown if it fails to start
        process = subprocess.Popen(
            [str(node), str(SCRIPT)], cwd=HERE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
        )
        try:
            provider = OidcProvider(_announced_issuer(process, log, timeout_s))
            _wait_for_discovery(provider.issuer, timeout_s)
            yield provider
        finally:
            _stop(process)


def _announced_issuer(process: subprocess.Popen[bytes], log: IO[bytes], timeout_s: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    line = process.stdout.readline() if ready else b""
    if not line.startswith(b'{"issuer":'):
        log.seek(0)
        raise RuntimeError(f"oidc-provider did not start: {line!r} {log.read()[-2000:]!r}")
    issuer: str = json.loads(line)["issuer"]
    return issuer


def _wait_for_discovery(issuer: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            status = httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=5).status_code
        except httpx.TransportError as exc:
            status = exc
        if status == 200:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"oidc-provider's discovery document did not answer: {status!r}")
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    assert process.stdin is not None
    process.stdin.close()  # the provider exits when its stdin closes
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


async def sign_in_at_provider(http: httpx.AsyncClient, authorize_url: str, login: str, redirect_uri: str) -> str:
    """Follow the provider from its authorization URL through its development login (and consent) pages as
    a person typing `login` would; returns the URL it sends the browser back to (`redirect_uri?code=...`)
    without opening it."""
    url = authorize_url
    for _ in range(12):
        if url.startswith(redirect_uri):
            return url
        response = await http.get(url)
        if response.is_redirect:
            url = str(response.url.join(response.headers["location"]))
            continue
        url = await _submit_page(http, response, login)
    raise AssertionError(f"the provider did not send the browser back to {redirect_uri}")


async def _submit_page(http: httpx.AsyncClient, page: httpx.Response, login: str) -> str:
    """Submits the provider's login or consent form; returns where it redirects."""
    form = re.search(r'<form[^>]*action="([^"]+)"[^>]*method="post"', page.text)
    prompt = re.search(r'name="prompt" value="(\w+)"', page.text)
    if page.status_code != 200 or form is None or prompt is None:
        raise AssertionError(f"not a sign-in page of the provider ({page.status_code}): {page.text[:500]}")
    fields = {"prompt": prompt[1]} | ({"login": login, "password": "any"} if prompt[1] == "login" else {})
    response = await http.post(str(page.url.join(html.unescape(form[1]))), data=fields)
    assert response.is_redirect, f"the provider's {prompt[1]} form answered {response.status_code}"
    return str(response.url.join(response.headers["location"]))
