"""An outside review's attacks on the web chat's sign-in, identity and ownership, over HTTP. Each test
asserts the SAFE behaviour, so it fails while the weakness it names is there:

- a client's own copy of the proxy's groups header is believed (the email header's duplicates are not);
- AGENT_WEB_IDENTITY_PROXIES refuses `*` but takes `0.0.0.0/0` and `::/0`, which mean the same;
- the sign-in cookie has no `__Host-` prefix, so a sibling subdomain can plant one (login CSRF);
- an answer's stored preview (GET /api/queries/<id>) still shows rows its asker's policy no longer reads,
  while the CSV of the same query applies the narrowed policy at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import uvicorn

from agent.app import AgentApp
from agent.config import ConfigError, load_settings
from agent.logs import configure_logging
from process.service import _uvicorn_config
from tests.fakes.anthropic_api import FakeAnthropic
from tests.web import test_sign_in
from tests.web.people_helpers import EMAIL_HEADER, GROUPS_HEADER, PROXY_MODE, Served
from tests.web.test_sign_in import oidc
from tests.web.test_web_policies import POLICY_FILE, by_origin
from tests.web_helpers import bound_socket, chat
from web.identity import SESSION_COOKIE

discovery = test_sign_in.discovery  # the issuer's published metadata (a fixture)
ALICE = "alice@example.com"
GROUP_POLICIES = """
contact: "#data-help"
policies:
  - name: newark
    members:
      - group: ewr-ops
    tables:
      nycflights13.flights: origin = 'EWR'
"""


async def test_a_client_sent_second_groups_header_is_not_believed(
    make_app: Callable[..., AgentApp], tmp_path: Path
) -> None:
    """The proxy's email header sent twice is refused ("one of them was not the proxy's"); the groups header
    sent twice is the same forgery (a proxy that adds its own header after the client's), and the groups pick
    the policy. Today the first copy, the client's, is believed."""
    policies = tmp_path / "access.yaml"
    policies.write_text(GROUP_POLICIES, encoding="utf-8")
    async with (
        Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site,
        httpx.AsyncClient(base_url=site.url, timeout=30) as client,
    ):
        forged = [(EMAIL_HEADER, ALICE), (GROUPS_HEADER, "ewr-ops"), (GROUPS_HEADER, "staff")]
        me = await client.get("/api/me", headers=forged)
    assert me.status_code == 401 or ("ewr-ops" not in me.json()["groups"] and me.json()["policy"] != "newark"), (
        f"a duplicated groups header chose the groups and the policy: {me.json()}"
    )


@pytest.mark.parametrize("everyone", ["0.0.0.0/0", "::/0", "0.0.0.0/0,::/0"])
def test_identity_proxies_that_are_every_address_are_refused_like_a_star(everyone: str) -> None:
    """`*` is refused because "anyone could then say who they are"; a network holding every address is `*`."""
    with pytest.raises(ConfigError, match="AGENT_WEB_IDENTITY_PROXIES"):
        load_settings(agent_web_identity_header="X-Email", agent_web_identity_proxies=everyone)


async def test_the_secure_sign_in_cookie_cannot_be_planted_by_a_sibling_subdomain(
    make_app: Callable[..., AgentApp], tmp_path: Path, discovery: str
) -> None:
    """Without the `__Host-` prefix a page on any sibling subdomain (or plain-http MITM of one) can set
    `agent_session` for the parent domain: the attacker's own validly signed cookie, which signs the victim
    into the attacker's account (login CSRF) or seeds a pending sign-in. Served Secure, the name must say so."""
    async with Served(make_app, tmp_path, **oidc(discovery, agent_web_url="https://analyst.example")) as site:
        sent = await site.client().get("/auth/sign-in", params={"next": "/"})
    cookie = sent.headers.get("set-cookie", "")
    assert cookie, "the sign-in wrote its cookie"
    name = cookie.split("=", 1)[0]
    assert name == SESSION_COOKIE or name.startswith("__Host-")
    assert name.startswith("__Host-"), f"a Secure sign-in cookie named {name!r} can be set by a sibling subdomain"


async def test_a_stored_preview_obeys_the_askers_policy_as_it_is_now(
    make_app: Callable[..., AgentApp], tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    """Ben asks under `newark` (group ewr-ops) and sees EWR's rows. He leaves ewr-ops (the proxy stops sending
    it): his policy is now the default, which reads nothing. The CSV of his query applies that at once, as
    the product says ("a policy narrowed since the answer applies at once"); the query's JSON must too."""
    policies = tmp_path / "access.yaml"
    policies.write_text(POLICY_FILE, encoding="utf-8")
    async with Served(make_app, tmp_path, agent_access_file=str(policies), **PROXY_MODE) as site:
        before = _ben(site, "staff, ewr-ops")
        fake_anthropic.script(*by_origin())
        run_id = (await chat(before, "flights by origin?"))[0].data["run_id"]
        then = (await before.get(f"/api/queries/{run_id}-Q1")).json()
        after = _ben(site, "staff")
        policy_now = (await after.get("/api/me")).json()["policy"]
        csv_now = await after.get(f"/api/queries/{run_id}-Q1.csv")
        json_now = await after.get(f"/api/queries/{run_id}-Q1")
    assert [row[0] for row in then["rows"]] == ["EWR"], "under newark he read EWR's rows"
    assert policy_now == "no-data"
    csv_rows = csv_now.text.splitlines()[1:] if csv_now.status_code == 200 else []
    assert not any(line.startswith("EWR") for line in csv_rows), "the CSV applies the narrowed policy"
    shown = json_now.json().get("rows", []) if json_now.status_code == 200 else []
    assert not any(row and row[0] == "EWR" for row in shown), (
        f"the stored preview still shows rows his policy no longer reads: {shown}"
    )


def _ben(site: Served, groups: str) -> httpx.AsyncClient:
    """Ben's browser behind the proxy, which says he is in `groups`."""
    client = site.client(email="ben@example.com")
    client.headers[GROUPS_HEADER] = groups
    return client


async def test_an_unreachable_provider_is_a_sign_in_page_not_a_server_error(
    make_app: Callable[..., AgentApp], tmp_path: Path
) -> None:
    """web/oidc.py catches `httpx.HTTPError`, but Authlib talks through `httpx2`, whose errors are other
    classes: a provider that is down is a bare 500 instead of the "could not be reached" page (502)."""
    async with Served(make_app, tmp_path, **oidc("http://127.0.0.1:9")) as site:
        sent = await site.client().get("/auth/sign-in", headers={"Accept": "text/html"})
    assert sent.status_code == 502 and "could not be reached" in sent.text, (sent.status_code, sent.text[:200])


async def test_a_provider_refusing_the_code_is_a_sign_in_page_not_a_server_error(
    make_app: Callable[..., AgentApp], tmp_path: Path, discovery: str
) -> None:
    """A callback with the right state whose code the provider's token endpoint refuses (here: 501) says
    "Signing in did not work" (400), as a forged one does; today httpx2's HTTPStatusError escapes as a 500."""
    async with Served(make_app, tmp_path, **oidc(discovery)) as site:
        sent = await site.client().get("/auth/sign-in")
        state = parse_qs(urlsplit(sent.headers["location"]).query)["state"][0]
        cookie = sent.headers["set-cookie"].split(";")[0].split("=", 1)[1]
        back = await site.client(cookie=cookie).get(
            "/auth/callback", params={"code": "refused", "state": state}, headers={"Accept": "text/html"}
        )
    assert back.status_code == 400 and "Signing in did not work" in back.text, (back.status_code, back.text[:200])


async def test_the_servers_log_never_holds_a_sign_in_code_or_state(
    make_app: Callable[..., AgentApp], tmp_path: Path, discovery: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agent serve` logs uvicorn's access lines at INFO (its default level) through agent/logs.py, which
    redacts only the configured secrets: the callback's request line carries the provider's authorization
    code and the state, a credential that anyone reading the logs could try to redeem."""
    root = logging.getLogger()
    kept = (list(root.handlers), root.level)
    async with Served(make_app, tmp_path, **oidc(discovery)) as site:
        settings = site.agent.settings
        configure_logging(settings)
        bound = bound_socket()
        server = uvicorn.Server(_uvicorn_config(settings, site.app, lifespan="off"))
        task = asyncio.create_task(server.serve(sockets=[bound]))
        try:
            while not server.started:
                await asyncio.sleep(0.01)
            port = bound.getsockname()[1]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                await client.get("/auth/callback", params={"code": "the-authorization-code", "state": "the-state"})
        finally:
            server.should_exit = True
            await task
            bound.close()
            root.handlers[:] = kept[0]  # configure_logging changed the process's root logger
            root.setLevel(kept[1])
    logged = capsys.readouterr().err
    assert "/auth/callback" in logged, "the access line was logged (uvicorn's default at INFO)"
    assert "the-authorization-code" not in logged and "the-state" not in logged, logged


async def test_an_https_public_address_in_capitals_still_makes_the_cookie_secure(
    make_app: Callable[..., AgentApp], tmp_path: Path, discovery: str
) -> None:
    """Behind a TLS proxy on the same machine (Host stays a loopback name), only AGENT_WEB_URL says the chat
    is public over https; the setting accepts `HTTPS://` (a scheme is case-blind) but the Secure decision
    reads `startswith("https:")`, so the cookie goes out over any plain-http request too."""
    async with Served(make_app, tmp_path, **oidc(discovery, agent_web_url="HTTPS://analyst.example")) as site:
        sent = await site.client().get("/auth/sign-in")
    flags = {part.strip().lower() for part in sent.headers["set-cookie"].split(";")[1:]}
    assert "secure" in flags, flags
