"""The web boundary against hostile input, over a real socket: security headers, JSON-only POSTs, Host
names, forwarded headers, rate limits, malformed bodies and ids, and `agent web`'s refusal to expose
itself unprotected."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.app import AgentApp
from agent.config import ConfigError, load_settings
from process.cli import main
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.web_helpers import WebApps, chat, read_all, sse_events
from web.exposure import check_exposure
from web.headers import CONTENT_SECURITY_POLICY


@pytest.fixture
async def apps(make_app: Callable[..., AgentApp], tmp_path: Path) -> AsyncIterator[WebApps]:
    apps = WebApps(make_app, tmp_path)
    yield apps
    await apps.close()


@pytest.fixture
def web(apps: WebApps) -> Callable[..., Any]:
    """Start the web app on a real socket; keyword arguments go to settings."""
    return apps.start


def assert_json_error(response: httpx.Response, *statuses: int) -> None:
    assert response.status_code in (statuses or range(400, 500)), (response.status_code, response.text)
    assert response.headers["content-type"] == "application/json", response.text
    assert isinstance(response.json()["error"], str) and response.json()["error"]


# --- headers ---


async def test_every_response_carries_the_security_headers(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()
    fake_anthropic.script(Reply(text="Hello."), Reply(text="[]"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        async with client.stream("POST", "/api/chat", json={"message": "hi"}) as stream:
            responses = [stream]
            await read_all(stream)
        for method, path in [
            ("GET", "/"),
            ("GET", "/static/app.js"),
            ("GET", "/api/conversations"),
            ("GET", "/api/conversations/nope"),
            ("GET", "/api/queries/nope-Q1.csv"),
            ("GET", "/api/queries/nope-Q1"),
            ("GET", "/queries/nope-Q1"),
            ("GET", "/healthz"),
            ("GET", "/metrics"),
            ("GET", "/nowhere"),
            ("GET", "/api/chat"),
        ]:
            responses.append(await client.request(method, path))
        responses.append(await client.get("/", headers={"Host": "evil.example"}))
    for response in responses:
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, response.url
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["x-frame-options"] == "DENY"
    assert "img-src 'self' data:" in CONTENT_SECURITY_POLICY and "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY


async def test_the_page_has_no_inline_script_or_style_for_the_policy_to_block(web, fake_anthropic) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        page = (await client.get("/")).text
        script = (await client.get("/static/app.js")).text
    assert not re.search(r"<script(?![^>]*\ssrc=)|<style|\sstyle=|\son\w+=", page)
    assert not re.search(r"setAttribute\(\s*[\"']style|[\"']style[\"']\s*:|cssText|insertRule", script)


# --- what a cross-site page or a rebinding DNS name can do ---


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None, "application/jsonx"],
)
async def test_a_post_that_is_not_json_is_refused_before_anything_runs(
    web, fake_anthropic: FakeAnthropic, content_type: str | None
) -> None:
    url, store = await web()
    headers = {"Content-Type": content_type} if content_type else {}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        response = await client.post("/api/chat", content=b'{"message": "hi"}', headers=headers)
    assert_json_error(response, 415)
    assert "application/json" in response.json()["error"]
    assert fake_anthropic.requests == [] and await store.list_conversations() == []


async def test_json_with_a_charset_is_json(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()
    fake_anthropic.script(Reply(text="Hello."), Reply(text="[]"))
    headers = {"Content-Type": "Application/JSON; charset=utf-8"}
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as client,
        client.stream("POST", "/api/chat", content=b'{"message": "hi"}', headers=headers) as response,
    ):
        assert response.status_code == 200
        assert (await read_all(response))[-1].event == "done"


async def test_only_the_allowed_host_names_are_answered(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()
    port = url.rsplit(":", 1)[1]
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for host in [f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST"]:
            assert (await client.get("/api/conversations", headers={"Host": host})).status_code == 200, host
        for host in ["evil.example", f"evil.example:{port}", "localhost.evil.example", "127.0.0.1.nip.io", ""]:
            response = await client.get("/api/conversations", headers={"Host": host})
            assert_json_error(response, 400)  # JSON like every other error, not Starlette's plain text
            assert "host name" in response.json()["error"], host
    url, _ = await web(agent_web_allowed_hosts="analyst.example.com, *.internal.example, ::1")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for host in ["analyst.example.com", "chat.internal.example:8443", "[::1]"]:
            assert (await client.get("/api/conversations", headers={"Host": host})).status_code == 200, host
        assert_json_error(await client.get("/api/conversations"), 400)  # 127.0.0.1 is no longer listed
        assert_json_error(await client.get("/", headers={"Host": "evil.example", "Accept": "text/html"}), 400)


def test_allowed_hosts_and_trusted_proxies_are_checked_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_WEB_ALLOWED_HOSTS", "a.*.example")
    with pytest.raises(ConfigError, match=r"^AGENT_WEB_ALLOWED_HOSTS: .*wildcard"):
        load_settings()
    monkeypatch.setenv("AGENT_WEB_ALLOWED_HOSTS", "analyst.example.com:8443")
    with pytest.raises(ConfigError, match=r"^AGENT_WEB_ALLOWED_HOSTS: .*without a port"):
        load_settings()
    monkeypatch.setenv("AGENT_WEB_ALLOWED_HOSTS", " Analyst.Example.com, 0:0::1 ,")
    monkeypatch.setenv("AGENT_WEB_TRUSTED_PROXIES", "10.0.0.0/8, proxy.example")
    with pytest.raises(ConfigError, match=r"^AGENT_WEB_TRUSTED_PROXIES: .*'proxy\.example' is not an IP"):
        load_settings()
    monkeypatch.setenv("AGENT_WEB_TRUSTED_PROXIES", "10.0.0.0/8, ::1, 127.0.0.1")
    settings = load_settings()
    assert settings.agent_web_allowed_hosts == ["analyst.example.com", "[::1]"]
    assert settings.agent_web_trusted_proxies == ["10.0.0.0/8", "::1", "127.0.0.1"]


# --- who the client is ---


async def test_x_forwarded_for_does_not_change_the_rate_limit_key_by_default(web, fake_anthropic) -> None:
    url, _ = await web(agent_web_exports_per_minute=2)
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        statuses = [
            (await client.get("/api/queries/nope-Q1.csv", headers={"X-Forwarded-For": f"203.0.113.{n}"})).status_code
            for n in range(3)
        ]
    assert statuses == [404, 404, 429]


async def test_x_forwarded_for_is_believed_from_a_trusted_proxy(web, fake_anthropic) -> None:
    url, _ = await web(agent_web_exports_per_minute=2, agent_web_trusted_proxies="127.0.0.1")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        statuses = [
            (await client.get("/api/queries/nope-Q1.csv", headers={"X-Forwarded-For": f"203.0.113.{n}"})).status_code
            for n in range(3)
        ]
        same = [
            (await client.get("/api/queries/nope-Q1.csv", headers={"X-Forwarded-For": "203.0.113.9"})).status_code
            for _ in range(3)
        ]
    assert statuses == [404, 404, 404] and same == [404, 404, 429]


async def test_csv_downloads_have_a_rate_limit_of_their_own(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web(agent_web_exports_per_minute=2, agent_web_rate_per_minute=5)
    fake_anthropic.always(Reply(text="ok"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        downloads = [(await client.get(f"/api/queries/nope-Q{n}.csv")) for n in range(3)]
        assert (await chat(client, "still allowed to ask?"))[-1].event == "done"
    assert [r.status_code for r in downloads] == [404, 404, 429]
    assert_json_error(downloads[-1], 429)
    assert "Too many downloads" in downloads[-1].json()["error"] and int(downloads[-1].headers["Retry-After"]) > 0


# --- the first event ---


async def test_started_comes_before_the_model_replies_and_is_replayed(web, fake_anthropic: FakeAnthropic) -> None:
    url, store = await web()
    model_may_answer = threading.Event()

    def slow_model(body: dict[str, Any]) -> Reply:
        model_may_answer.wait(10)
        return Reply(text="Hello.")

    fake_anthropic.script(slow_model, Reply(text="[]"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        async with client.stream("POST", "/api/chat", json={"message": "hello?"}) as response:
            events = sse_events(response)
            first = await anext(events)
            assert not model_may_answer.is_set()  # the model has not said a word yet
            model_may_answer.set()
            rest = [event async for event in events]
        async with client.stream("GET", f"/api/runs/{first.data['run_id']}/events") as response:
            replay = await read_all(response)
    assert (first.event, first.id) == ("started", 1)
    assert first.data["run_id"] and first.data["conversation_id"] and first.data["question"] == "hello?"
    assert rest[-1].event == "done" and all(e.data["run_id"] == first.data["run_id"] for e in rest)
    assert [(e.event, e.id) for e in replay] == [(e.event, e.id) for e in [first, *rest]]
    stored = await store.run_events(first.data["run_id"])  # what a replay after a restart reads
    assert stored is not None and stored[1][0] == {"id": 1, "event": "started", "data": first.data}


# --- input that used to give a 500 ---

DEEP = b'{"message": "hi", "x": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
LONG_INT = b'{"message": "hi", "x": ' + b"7" * 5_000 + b"}"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (rb'{"message": "\ud800"}', "message: Value error, must be valid Unicode text"),
        (rb'{"message": "hi \udfff there"}', "message: Value error, must be valid Unicode text"),
        (rb'{"message": "hi", "conversation_id": "\ud800"}', "conversation_id: "),
        (DEEP, "The body must be JSON"),
        (b'{"message": ' + b"[" * 30_000, "The body must be JSON"),
        (LONG_INT, "The body must be JSON"),
        (b'{"message": ' + b"9" * 5_000 + b"}", "The body must be JSON"),
        (b'{"message": "hi", "x": -' + b"1" * 4_301 + b"}", "The body must be JSON"),
        (b'{"message": "caf\xe9"}', "The body must be JSON"),  # Latin-1, not UTF-8
        (b"", "The body must be JSON"),
        (b"[]", "body: Input should be a valid dictionary"),
        (b"null", "body: Input should be a valid dictionary"),
        (b'"hi"', "body: Input should be a valid dictionary"),
        (b'{"message": 5}', "message: Input should be a valid string"),
        (b'{"message": ["hi"]}', "message: Input should be a valid string"),
        (b'{"message": NaN}', "message: Input should be a valid string"),
        (b'{"message": "hi", "conversation_id": 5}', "conversation_id: Input should be a valid string"),
        (b'{"message": "hi", "conversation_id": "' + b"a" * 65 + b'"}', "conversation_id: String should have at most"),
        (b'{"message": "hi", "conversation_id": ""}', "No conversation"),
    ],
)
async def test_hostile_bodies_get_a_json_4xx(web, fake_anthropic: FakeAnthropic, body: bytes, message: str) -> None:
    url, _ = await web()
    fake_anthropic.always(Reply(text="ok"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        response = await client.post("/api/chat", content=body, headers={"Content-Type": "application/json"})
    assert_json_error(response)
    assert response.json()["error"].startswith(message) or message in response.json()["error"]
    assert fake_anthropic.requests == []


@pytest.mark.parametrize(
    ("header", "after"),
    [
        ("²".encode("latin-1"), None),  # a superscript two: str.isdigit() says yes, int() says no
        ("١".encode(), None),  # Arabic-Indic one, as UTF-8 bytes
        (None, "²"),
        (None, "١"),  # int() would read this as 1
        (b"-1", None),
        (b"1e3", None),
        (b"+1", None),
        (b"1 2", None),
        (b"9" * 19, None),
        (b"9" * 5_000, None),
        (None, "0x10"),
    ],
)
async def test_a_malformed_last_event_id_is_a_json_400(
    web, fake_anthropic: FakeAnthropic, header: bytes | None, after: str | None
) -> None:
    url, _ = await web()
    fake_anthropic.script(Reply(text="Hello."), Reply(text="[]"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        run_id = (await chat(client, "hello"))[0].data["run_id"]
        response = await client.get(
            f"/api/runs/{run_id}/events",
            headers={"Last-Event-ID": header} if header is not None else {},
            params={"after": after} if after is not None else {},
        )
        fine = await client.get(f"/api/runs/{run_id}/events", headers={"Last-Event-ID": "2"})
    assert_json_error(response, 400)
    assert "Last-Event-ID" in response.json()["error"]
    assert fine.status_code == 200 and fine.text.startswith("id: 3")  # the good header still resumes after 2


# --- every route, odd ids and wrong methods ---

ODD_IDS = [
    "x",
    "%ED%A0%80",  # a lone surrogate, URL-encoded
    "%FF%FE",  # not UTF-8
    "%00",
    "%0D%0ASet-Cookie:%20a=b",
    "..%2F..%2Fetc%2Fpasswd",
    "%E2%80%AE" + "a" * 40,
    "a" * 4_000,
    "'%20OR%201=1--",
    "Q1",
    "-",
    "²",
]


@pytest.mark.parametrize("odd", ODD_IDS)
async def test_odd_ids_on_every_route_get_a_json_404(web, fake_anthropic: FakeAnthropic, odd: str) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for method, path in [
            ("GET", f"/api/runs/{odd}/events"),
            ("GET", f"/api/conversations/{odd}"),
            ("DELETE", f"/api/conversations/{odd}"),
            ("GET", f"/api/queries/{odd}.csv"),
            ("GET", f"/api/queries/{odd}-Q1.csv"),
            ("GET", f"/api/queries/{odd}"),
        ]:
            response = await client.request(method, url + path)
            assert_json_error(response, 404)
            assert "set-cookie" not in response.headers
        for path in [f"/queries/{odd}", f"/c/{odd}"]:  # a page's address answers a browser with a page
            response = await client.get(url + path, headers={"Accept": "text/html"})
            assert response.status_code == 404 and response.headers["content-type"] == "text/html; charset=utf-8"
            assert "<h2>Nothing here</h2>" in response.text and "set-cookie" not in response.headers


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/api/chat", 405),
        ("PUT", "/api/chat", 405),
        ("POST", "/api/conversations", 405),
        ("PUT", "/api/conversations/x", 405),
        ("POST", "/api/runs/x/events", 405),
        ("DELETE", "/api/queries/x.csv", 405),
        ("DELETE", "/api/queries/x", 405),
        ("POST", "/queries/x", 405),
        ("GET", "/api/nowhere", 404),
        ("GET", "/api/queries/.csv", 404),
        ("GET", "/static/nope.js", 404),
        ("GET", "/static/../web/app.py", 404),
        ("GET", "/static/%2e%2e/app.py", 404),
    ],
)
async def test_unknown_routes_and_methods_answer_in_json(
    web, fake_anthropic: FakeAnthropic, method: str, path: str, status: int
) -> None:
    url, _ = await web()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        response = await client.request(method, path)
    assert_json_error(response, status)


async def test_odd_authorization_headers_are_a_json_401(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web(agent_web_token="s3cret")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for value in [b"Bearer \xff\xfe", b"Bearer", b"bearer s3cret", b"Bearer s3cret2", b"Basic czNjcmV0", b"\xb2"]:
            response = await client.get("/api/conversations", headers={"Authorization": value})
            assert_json_error(response, 401)


async def test_a_chunked_body_past_the_cap_is_refused(web, fake_anthropic: FakeAnthropic) -> None:
    url, _ = await web()

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"message": "'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}'

    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        response = await client.post("/api/chat", content=chunks(), headers={"Content-Type": "application/json"})
    assert_json_error(response, 413)


async def test_an_unexpected_failure_is_a_json_500_without_a_stack_trace(web, apps: WebApps, fake_anthropic) -> None:
    url, _ = await web()
    apps.states[-1].close()  # every read now fails inside sqlite3
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        response = await client.get("/api/conversations")
    assert response.status_code == 500
    assert response.json() == {"error": "Something went wrong on the server; try again."}
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["cache-control"] == "no-store"


# --- `agent web` on an exposed address ---


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port already taken, so that `agent web` fails fast instead of serving if it ever gets past its checks."""
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        yield held.getsockname()[1]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "analyst.example.com"])
def test_agent_web_refuses_an_exposed_address_without_a_token(
    host: str, busy_port: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    command = ["web", "--host", host, "--port", str(busy_port)]
    assert main(command) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: AGENT_WEB_TOKEN: --host {host} serves other machines") and error.count("\n") == 1

    monkeypatch.setenv("AGENT_WEB_TOKEN", "s3cret")  # a token alone is not enough: the names must be known
    assert main(command) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: AGENT_WEB_ALLOWED_HOSTS:") and error.count("\n") == 1


@pytest.mark.parametrize(
    ("environment", "host"),
    [
        ({}, "127.0.0.1"),
        ({}, "127.0.0.2"),
        ({}, "::1"),
        ({}, "localhost"),
        ({"AGENT_WEB_TOKEN": "s3cret", "AGENT_WEB_ALLOWED_HOSTS": "analyst.example.com"}, "0.0.0.0"),
        ({"AGENT_WEB_ALLOW_NO_TOKEN": "true", "AGENT_WEB_ALLOWED_HOSTS": "localhost"}, "0.0.0.0"),
        (  # people sign in: no token is needed
            {
                "AGENT_OIDC_ISSUER": "https://id.example",
                "AGENT_OIDC_CLIENT_ID": "analyst",
                "AGENT_SESSION_SECRET": "k" * 32,
                "AGENT_WEB_ALLOWED_HOSTS": "analyst.example.com",
            },
            "0.0.0.0",
        ),
        (
            {
                "AGENT_WEB_IDENTITY_HEADER": "X-Forwarded-Email",
                "AGENT_WEB_IDENTITY_PROXIES": "10.0.0.2",
                "AGENT_WEB_ALLOWED_HOSTS": "analyst.example.com",
            },
            "0.0.0.0",
        ),
    ],
)
def test_agent_web_serves_loopback_or_a_protected_address(
    environment: dict[str, str], host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    check_exposure(load_settings(), host)


def test_the_content_security_policy_is_exactly_this() -> None:
    """Written out here, not read from the module: a loosened policy must fail a test."""
    assert CONTENT_SECURITY_POLICY == (
        "default-src 'self'; img-src 'self' data:; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


def test_an_idle_connection_outlives_the_clients_pool_expiry() -> None:
    """uvicorn's default (5 s) equals httpx's pool expiry: a client reusing its connection as the server
    closed it lost the request (a Slack click failed with ReadError under load). The server now keeps an
    idle connection far longer than a client keeps it for reuse, and longer than load balancers' 60 s."""
    import uvicorn

    from web.exposure import server_options

    config = uvicorn.Config(app=None, **server_options(load_settings()))
    pool_expiry = httpx.Limits().keepalive_expiry
    assert pool_expiry is not None and config.timeout_keep_alive >= max(60, 2 * pool_expiry)
