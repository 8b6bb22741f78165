"""docker-compose.yml and everything it mounts, without Docker: its services (two app hosts on one
PostgreSQL behind nginx), each mounted file parsing as its type, container paths that agree with one
another, secrets from .env only, a slim non-root app image with a health check, and the ClickHouse init
SQL loading the demo data (run in the embedded engine, which reads FROM INFILE like clickhouse-client does)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from xml.etree import ElementTree

import yaml

from agent.config import Settings
from agent.db.demo import TABLES, server_init_sql
from tests.conftest import DEMO_COUNTS, make_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
INIT_SQL = ROOT / "docker" / "clickhouse" / "init" / "nycflights13.sql"
# what tests/agent/db/test_db_server_fake.py connects as
AGENT_USER_XML = ROOT / "docker" / "clickhouse" / "agent-user.xml"
SERVICES = {"clickhouse", "postgres", "app-1", "app-2", "proxy", "prometheus", "grafana"}
APPS = ("app-1", "app-2")
NGINX_CONF = ROOT / "deploy" / "nginx" / "nginx.conf"
SECRET = re.compile(r"(PASSWORD|SECRET|API_KEY|(?<!_NO)_TOKEN)$")  # not AGENT_WEB_ALLOW_NO_TOKEN, a switch
# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?message}, ${VAR?message}
INTERPOLATION = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def stack() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def services() -> dict[str, dict[str, Any]]:
    return dict(stack()["services"])


def bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """(file or folder on this machine, path in the container) for each `./...` volume."""
    found = []
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("."):
            found.append(((ROOT / source).resolve(), target))
    return found


def parse(path: Path) -> Any:
    """The file as its type says: YAML, JSON or XML parsed, SQL read; each must have content."""
    text = path.read_text()
    assert text.strip(), f"{path} is empty"
    if path.suffix in (".yml", ".yaml"):
        return yaml.safe_load(text)
    if path.suffix == ".json":
        return json.loads(text)
    if path.suffix == ".xml":
        return ElementTree.fromstring(text)
    if path.suffix == ".sql":
        return text
    if path.suffix == ".conf":  # nginx: balanced blocks, each directive ended by `;`
        body = re.sub(r"#.*", "", text)
        depth = 0
        for char in body:
            depth += {"{": 1, "}": -1}.get(char, 0)
            assert depth >= 0, f"{path}: a block closed that was never opened"
        assert depth == 0, f"{path}: a block left open"
        for line in filter(None, (line.strip() for line in body.splitlines())):
            assert line.endswith((";", "{", "}")), f"{path}: {line!r} does not end a directive"
        return text
    raise AssertionError(f"{path}: a mounted file of a type this test does not know")


def environment(service: dict[str, Any]) -> dict[str, str]:
    return {name: str(value) for name, value in (service.get("environment") or {}).items()}


def default_of(value: str) -> str:
    """The value compose uses when .env leaves the variable unset (`${VAR:-default}`)."""
    return INTERPOLATION.sub(lambda m: m.group(3) if m.group(2) in (":-", "-") else "", value)


def mounted_file(service: str, target: str) -> Path:
    for source, path in bind_mounts(services()[service]):
        if target == path or target.startswith(path.rstrip("/") + "/"):
            return source / target.removeprefix(path).lstrip("/") if source.is_dir() else source
    raise AssertionError(f"{target} is not mounted into {service}")


def test_the_stack_has_its_services() -> None:
    found = services()
    assert set(found) >= SERVICES
    for app in APPS:
        assert found[app]["command"][:2] == ["agent", "serve"] and found[app]["build"] == "."
        assert found[app]["depends_on"]["clickhouse"] == {"condition": "service_healthy"}
        assert found[app]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert found["app-1"]["volumes"] != found["app-2"]["volumes"], "each host its own data folder"
    for name in ("prometheus", "grafana", "postgres", "proxy"):
        image = found[name]["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image ({image})"
    clickhouse = (ROOT / found["clickhouse"]["build"] / "Dockerfile").read_text()
    assert "FROM clickhouse/clickhouse-server:26.8" in clickhouse  # parseQueryToJSON: 26.6 or newer


def test_every_mounted_file_exists_and_parses() -> None:
    count = 0
    for name, service in services().items():
        for source, target in bind_mounts(service):
            assert source.exists(), f"{name} mounts {source}, which does not exist"
            for path in sorted(source.rglob("*")) if source.is_dir() else [source]:
                if path.is_file():
                    assert parse(path) is not None, path
                    count += 1
            assert target.startswith("/"), f"{name}: {target}"
    assert count >= 7
    assert mounted_file("clickhouse", "/etc/clickhouse-server/users.d/agent-user.xml") == AGENT_USER_XML


def test_container_paths_and_names_agree() -> None:
    found = services()
    prometheus = parse(mounted_file("prometheus", "/etc/prometheus/prometheus.yml"))
    for rules in prometheus["rule_files"]:
        assert parse(mounted_file("prometheus", rules))["groups"], rules
    (job,) = prometheus["scrape_configs"]
    targets = job["static_configs"][0]["targets"]
    assert sorted(target.split(":")[0] for target in targets) == list(APPS), "every host is scraped"
    for target in targets:
        host, port = target.split(":")
        app = found[host]
        assert port == app["command"][app["command"].index("--port") + 1]
        assert host in default_of(environment(app)["AGENT_WEB_ALLOWED_HOSTS"]).split(",")  # else the scrape gets 400
    # With AGENT_WEB_TOKEN set, /metrics needs it: Prometheus reads it from the secret compose makes of it.
    assert job["authorization"]["type"] == "Bearer"
    secret = job["authorization"]["credentials_file"].removeprefix("/run/secrets/")
    assert secret in found["prometheus"]["secrets"] and stack()["secrets"][secret] == {"environment": "AGENT_WEB_TOKEN"}

    grafana = found["grafana"]
    (datasource,) = parse(mounted_file("grafana", "/etc/grafana/provisioning/datasources/prometheus.yml"))[
        "datasources"
    ]
    assert urlsplit(datasource["url"]).hostname == "prometheus" and datasource["uid"] == "prometheus"
    (provider,) = parse(mounted_file("grafana", "/etc/grafana/provisioning/dashboards/agent.yml"))["providers"]
    dashboards = mounted_file("grafana", provider["options"]["path"])
    assert [p.name for p in dashboards.glob("*.json")] == ["agent.json"]
    assert mounted_file("grafana", environment(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]).exists()

    app = found["app-1"]
    url = urlsplit(default_of(environment(app)["CLICKHOUSE_URL"]))
    assert (url.hostname, url.username, url.path) == ("clickhouse", "agent", "/nycflights13")
    user = ElementTree.parse(AGENT_USER_XML).getroot()
    assert user.findtext("users/agent/grants/query") == "GRANT SELECT, SHOW TABLES, SHOW COLUMNS ON nycflights13.*"
    password = user.find("users/agent/password")
    assert password is not None and password.get("from_env") in environment(found["clickhouse"])


def test_secrets_come_from_dot_env_only() -> None:
    documented = set(re.findall(r"^(\w+)=", (ROOT / ".env.example").read_text(), re.MULTILINE))
    for name, service in services().items():
        assert set(service.get("env_file", [".env"])) <= {".env"}, name
        for variable, value in environment(service).items():
            for used, kind, default in INTERPOLATION.findall(value):
                assert used in documented, f"{name}: {used} is not in .env.example"
                if SECRET.search(used):
                    assert kind == ":?" or (kind == ":-" and default == ""), f"{name}: {used} has a default"
            if SECRET.search(variable):
                assert INTERPOLATION.search(value), f"{name}: {variable} is written into the compose file"
    for ignore in (".gitignore", ".dockerignore"):
        assert ".env" in (ROOT / ignore).read_text().split(), ignore
    for dockerfile in (ROOT / "Dockerfile", ROOT / "docker" / "clickhouse" / "Dockerfile"):
        for line in dockerfile.read_text().splitlines():
            if re.match(r"\s*(ENV|ARG)\b", line):
                assert not SECRET.search(line), f"{dockerfile}: {line}"


def test_the_app_image_is_slim_runs_as_a_user_and_checks_its_health() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    assert re.match(r"FROM python:3\.1\d-slim$", next(line for line in lines if line.startswith("FROM")))
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0", "0:0")
    assert any(line.startswith("HEALTHCHECK") for line in lines)
    assert any("/readyz" in line for line in lines)
    assert lines[-1] == 'CMD ["agent", "serve", "--host", "0.0.0.0", "--port", "8000"]'


def test_the_init_sql_is_generated_from_the_demo_ddl() -> None:
    assert INIT_SQL.read_text() == server_init_sql(), "stale: python -m agent.db.demo sql > " + str(INIT_SQL)
    assert all(f"CREATE TABLE nycflights13.`{table.name}`" in INIT_SQL.read_text() for table in TABLES)


LOAD = """
import sys, zipfile, shutil
from pathlib import Path
from chdb import session
from agent.db.demo import REGISTRATIONS, TABLES, server_init_sql, source_dir
scratch = Path(sys.argv[1])
for table in TABLES:
    source = source_dir() / table.source
    if source.suffix == ".zip":
        zipfile.ZipFile(source).extractall(scratch)
    else:
        shutil.copy(source, scratch)
engine = session.Session(str(scratch / "engine"))
engine.query(server_init_sql(str(scratch)))
for table in [*TABLES, REGISTRATIONS]:
    print(table.name, str(engine.query(f"SELECT count() FROM nycflights13.{table.name}", "CSV")).strip())
print("final", str(engine.query(f"SELECT count() FROM nycflights13.{REGISTRATIONS.name} FINAL", "CSV")).strip())
print("first", str(engine.query("SELECT toString(min(time_hour), 'UTC') FROM nycflights13.flights", "CSV")).strip())
"""


def test_the_init_sql_loads_the_demo_data(tmp_path: Path) -> None:
    """In a child process: the embedded engine allows one data directory per process."""
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD, str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    counts = dict(line.split(" ", 1) for line in loaded.stdout.splitlines())
    assert {name: int(counts[name]) for name in DEMO_COUNTS} == DEMO_COUNTS
    assert counts["first"] == '"2013-01-01 10:00:00"'  # read as UTC, as the embedded loader reads it
    assert counts["final"] == "3322"  # the registrations' updates in a part of their own, as embedded


def test_the_agent_users_profile_is_as_strict_as_the_agents_limits() -> None:
    """The start-up check (agent/db/server.py) refuses a read-only profile looser than the agent's own limits;
    tests/agent/db/test_db_server_fake.py connects as this very user."""
    profile = ElementTree.parse(AGENT_USER_XML).getroot().find("profiles/agent_readonly")
    assert profile is not None and profile.findtext("readonly") == "1"
    limits = [setting.tag for setting in profile if setting.tag in Settings.model_fields]
    assert len(limits) == 6
    for name in limits:
        assert 0 < int(profile.findtext(name) or 0) <= Settings.model_fields[name].default, name


def test_an_optional_secret_left_unset_in_dot_env_is_unset_in_the_app() -> None:
    """Compose passes `VAR=` for `${VAR:-}` when .env leaves it out; the app must read that as not set
    (an empty AGENT_WEB_TOKEN would otherwise demand an empty bearer token)."""
    optional = [
        name for name, value in environment(services()["app-1"]).items() if SECRET.search(name) and ":-}" in value
    ]
    assert "AGENT_WEB_TOKEN" in optional and "SLACK_BOT_TOKEN" in optional
    settings = make_settings(**{name.lower(): "" for name in optional})
    assert all(getattr(settings, name.lower()) is None for name in optional)


def _nginx() -> str:
    return mounted_file("proxy", "/etc/nginx/nginx.conf").read_text()


def test_the_app_hosts_share_one_postgresql_and_differ_only_in_their_data_folder() -> None:
    found = services()
    one, two = found["app-1"], found["app-2"]
    assert {k: v for k, v in one.items() if k != "volumes"} == {k: v for k, v in two.items() if k != "volumes"}
    postgres = environment(found["postgres"])
    state = urlsplit(default_of(environment(one)["AGENT_STATE_URL"]))
    assert state.scheme == "postgresql" and (state.hostname, state.port) == ("postgres", 5432)
    assert (state.username, state.path) == (postgres["POSTGRES_USER"], "/" + postgres["POSTGRES_DB"])
    assert INTERPOLATION.findall(environment(one)["AGENT_STATE_URL"])[0][0] == "POSTGRES_PASSWORD"
    assert "POSTGRES_PASSWORD" in INTERPOLATION.findall(postgres["POSTGRES_PASSWORD"])[0]
    assert any(volume.endswith(":/var/lib/postgresql/data") for volume in found["postgres"]["volumes"])
    assert "ports" not in one, "the hosts are reached through the proxy only"


def test_the_proxy_spreads_requests_over_every_host_and_streams_events() -> None:
    found = services()
    conf = _nginx()
    upstream = re.search(r"upstream (\w+) \{(.*?)\}", conf, re.DOTALL)
    assert upstream is not None and f"proxy_pass http://{upstream.group(1)};" in conf
    servers = re.findall(r"server ([\w-]+):(\d+)", upstream.group(2))
    assert sorted(host for host, _ in servers) == list(APPS)
    for host, port in servers:
        assert port == found[host]["command"][found[host]["command"].index("--port") + 1]
    (published,) = found["proxy"]["ports"]
    assert published == "127.0.0.1:8000:8000" and re.search(r"listen 8000;", conf)
    assert "proxy_buffering off;" in conf, "server-sent events pass as they are written"
    assert re.search(r"proxy_next_upstream [^;]*\bhttp_503\b[^;]*\bnon_idempotent\b", conf), (
        "a draining host's refusal goes to the other host"
    )
    assert "proxy_set_header Host $host;" in conf  # the hosts check it against AGENT_WEB_ALLOWED_HOSTS


def test_the_hosts_believe_forwarded_addresses_from_the_proxy_alone() -> None:
    found = services()
    address = found["proxy"]["networks"]["default"]["ipv4_address"]
    (subnet,) = stack()["networks"]["default"]["ipam"]["config"]
    assert ip_address(address) in ip_network(subnet["subnet"])
    for app in APPS:
        assert environment(found[app])["AGENT_WEB_TRUSTED_PROXIES"] == address
    assert "X-Forwarded-For $proxy_add_x_forwarded_for" in _nginx()
