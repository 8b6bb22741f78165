"""The one settings object: read once at start-up from the environment and `.env`, then passed down."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, cast
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

# Defaults come from the installed SDK's model list (see tests/agent/test_config.py, which checks them).
DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_FOLLOWUP_MODEL = "claude-haiku-5-5"
DEMO_KNOWLEDGE_DIR = Path(__file__).resolve().parent.parent / "knowledge"

Provider = Literal["anthropic", "bedrock", "vertex", "openai"]
PROVIDERS: tuple[Provider, ...] = ("anthropic", "bedrock", "vertex", "openai")
Role = Literal["main", "followup", "judge"]


_IPV4_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
MISSING_ANTHROPIC_KEY = "ANTHROPIC_API_KEY is not set; the agent needs it to ask the model."


def covers_the_internet(network: str) -> bool:
    """Whether a CIDR network is wider than the widest private range (10.0.0.0/8; fc00::/7 in IPv6): any
    such network holds public addresses by the million, so as a list of proxies it means `*`. That takes
    0.0.0.0/0 and ::/0 and their halves and quarters, and ::ffff:0:0/96 (every IPv4 client, as a dual-stack
    socket writes its peer), while a proxy fleet's own private network (10.0.0.0/8) stays allowed."""
    parsed = ipaddress.ip_network(network, strict=False)
    if parsed.version == 6 and parsed.overlaps(_IPV4_MAPPED):  # IPv4 addresses written as IPv6 ones
        return parsed.prefixlen - 96 < 8
    return parsed.prefixlen < (8 if parsed.version == 4 else 7)


class ConfigError(Exception):
    """A missing or malformed setting; the message is one line naming the variable."""


@dataclass(frozen=True)
class ModelRef:
    """One entry of a role's model list: which provider serves which model."""

    provider: Provider
    name: str

    def __str__(self) -> str:
        return f"{self.provider}:{self.name}"


def parse_models(text: str) -> tuple[ModelRef, ...]:
    """An ordered, comma-separated list of `[provider:]model` (no prefix: anthropic). ValueError says
    what is wrong in one line. Only the first colon separates: `openai:llama3.1:8b` is Ollama's `llama3.1:8b`."""
    refs: list[ModelRef] = []
    for entry in (item.strip() for item in text.split(",")):
        if not entry:
            raise ValueError(f"{text!r}: an empty entry; list models as `[provider:]model`, separated by commas")
        provider, _, name = entry.partition(":") if ":" in entry else ("anthropic", "", entry)
        provider, name = provider.strip().lower(), name.strip()
        if provider not in PROVIDERS:
            raise ValueError(f"{entry!r}: unknown provider {provider!r}; use one of {', '.join(PROVIDERS)}")
        if not name or any(char.isspace() for char in name):
            raise ValueError(f"{entry!r}: the model name after {provider}: is empty or has spaces")
        ref = ModelRef(cast(Provider, provider), name)
        if ref in refs:
            raise ValueError(f"{entry!r} is listed twice")
        refs.append(ref)
    return tuple(refs)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    # --- where things live ---
    agent_data_dir: Path = Field(
        Path(".data"), description="Where the app keeps its own state (conversations, embedded data)."
    )
    agent_state_url: str = Field(
        "",
        description="Where the app's state lives: unset, AGENT_DATA_DIR/state.sqlite3; a path (or sqlite:///path), "
        "that SQLite file; postgresql://user:password@host/db, a PostgreSQL database several hosts can share.",
    )
    clickhouse_url: str = Field(
        "",
        description="chdb:///abs/dir (embedded engine) or http(s)://user:password@host:8123/database. "
        "Default: the embedded engine in AGENT_DATA_DIR/clickhouse.",
    )
    clickhouse_databases: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["nycflights13"],
        description="Databases (glob patterns) whose tables go into the schema prompt.",
    )
    clickhouse_exclude_tables: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Table glob patterns (db.table) the model may not read; left out of the schema prompt.",
    )
    clickhouse_sandbox: bool = Field(
        True,
        description="Confine the embedded engine's process with Landlock (no files outside its data, no "
        "network, no exec). Turn off only to debug; without Landlock support it runs unconfined and says so.",
    )

    agent_prompts_dir: Path = Field(
        Path(__file__).resolve().parent.parent / "prompts", description="Folder of the Jinja2 prompt files."
    )

    # --- the models (docs: README "Models"; translated per provider in agent/llm/capabilities.py) ---
    anthropic_api_key: SecretStr | None = Field(None, description="Anthropic API key.")
    anthropic_base_url: str | None = Field(None, description="Point the SDK at a fake or a gateway.")
    agent_model: str = Field(
        DEFAULT_MODEL,
        description="Models of the analysis loop, in order: a comma-separated list of `[provider:]model` "
        "(providers anthropic, bedrock, vertex, openai; no prefix: anthropic). When one is overloaded, rate "
        "limited past its retries or unreachable, the run goes on with the next.",
    )
    agent_followup_model: str = Field(
        DEFAULT_FOLLOWUP_MODEL,
        description="Cheaper models for follow-ups and example questions, as a list like AGENT_MODEL.",
    )
    agent_judge_model: str | None = Field(
        None,
        description="Models of the eval judge, as a list like AGENT_MODEL (`agent evals run --judge-model` wins). "
        "Unset: AGENT_MODEL.",
    )
    agent_fallback_retries: int = Field(
        1,
        ge=0,
        description="Retries (429, 529, 5xx, a reply cut off) on a model before the call moves on to the next in "
        "its list; the last model of a list gets AGENT_LLM_MAX_RETRIES. Each retry waits 0.5 s, then 1 s, 2 s, ... "
        "(or what the API's retry-after says), so a fallback costs about that much.",
    )
    agent_model_cooldown_s: float = Field(
        30.0,
        ge=0,
        description="After a model is passed over as overloaded or unavailable, how long the next calls start at "
        "the model after it (so every round does not wait out the first model's retries again). 0: always start at "
        "the first.",
    )
    openai_base_url: str | None = Field(
        None,
        description="Base URL of an OpenAI-compatible Chat Completions server for `openai:` models, e.g. "
        "http://localhost:8000/v1 (vLLM) or http://localhost:11434/v1 (Ollama). Unset: OpenAI's API.",
    )
    openai_api_key: SecretStr | None = Field(
        None, description="Key for `openai:` models; a local server with OPENAI_BASE_URL may need none."
    )
    aws_region: str | None = Field(
        None, description="AWS region of `bedrock:` models; credentials come from the usual AWS chain."
    )
    cloud_ml_region: str | None = Field(None, description="Google Cloud region of `vertex:` models.")
    anthropic_vertex_project_id: str | None = Field(
        None, description="Google Cloud project of `vertex:` models; credentials from Application Default Credentials."
    )
    agent_prompt_caching: bool = Field(
        True,
        description="Cache the request prefix (tools, system prompt, schema) between calls where the provider "
        "supports it; a provider without it goes on uncached, and start-up says so once.",
    )
    agent_thinking_budget: int | None = Field(
        None,
        ge=1024,
        description="Tokens the analysis loop may spend thinking before it answers, where the provider supports "
        "it (added to AGENT_MAX_TOKENS). Unset: no extended thinking.",
    )
    agent_max_tokens: int = Field(4096, ge=256, description="Maximum output tokens per model call.")
    agent_temperature: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Sampling temperature of the analysis loop and the eval judge (0 to 1; 0 makes eval runs as "
        "repeatable as sampling allows). Unset: none is sent, the API default. The API version the installed SDK "
        "sends (2026-10-21) rejects any temperature with a 400, so set it only for a gateway or API version that "
        "accepts one.",
    )
    agent_context_tokens: int = Field(
        200_000, ge=8_000, description="The model's context window; old tool results are trimmed near it."
    )
    agent_llm_timeout_s: float = Field(120.0, gt=0, description="Timeout of one model call.")
    agent_llm_max_retries: int = Field(4, ge=0, description="Retries on 429/529/5xx and mid-stream overload.")

    # --- the loop ---
    agent_max_rounds: int = Field(10, ge=2, description="Model round-trips per question.")
    agent_history_turns: int = Field(10, ge=0, description="Earlier turns carried into a question.")
    agent_history_full_turns: int = Field(2, ge=0, description="Most recent turns kept whole.")
    agent_history_chars: int = Field(60_000, ge=1_000, description="Character cap on carried history.")

    # --- budgets (all off by default) ---
    agent_question_max_tokens: int | None = Field(
        None,
        ge=1,
        description="Tokens (input, output, cache) one question may spend; past it, it answers from what it has.",
    )
    agent_question_max_rows_read: int | None = Field(
        None, ge=1, description="Rows ClickHouse may read for one question; past it, it answers from what it has."
    )
    agent_daily_user_tokens: int | None = Field(
        None, ge=1, description="Tokens one web client or Slack user may spend per UTC day; then questions wait."
    )
    agent_daily_user_cost_usd: float | None = Field(
        None,
        gt=0,
        description="Estimated dollars (agent/pricing.yaml) one web client or Slack user may spend per UTC day.",
    )

    # --- reports (agent/reports; asked for explicitly: `agent report`, Slack `report:`, the web's Report) ---
    agent_report_max_steps: int = Field(16, ge=2, description="Model round trips one report run may make.")
    agent_report_max_tool_calls: int = Field(24, ge=1, description="Tool calls one report run may make.")
    agent_report_max_queries: int = Field(
        15, ge=1, description="Queries one report run may execute (a reused result is free); past it, it ends partial."
    )
    agent_report_max_minutes: float = Field(10.0, gt=0, description="Minutes one report run may take.")
    agent_report_max_tokens: int | None = Field(
        500_000, ge=1, description="Tokens (input, output, cache) one report run may spend. Unset: no limit."
    )
    agent_report_max_cost_usd: float | None = Field(
        2.0, gt=0, description="Estimated dollars (agent/pricing.yaml) one report run may spend. Unset: no limit."
    )
    agent_report_max_running: int = Field(
        1, ge=1, description="Reports one person may have running at once; another is refused until one ends."
    )

    # --- query limits (set on the connection, enforced by the engine) ---
    max_rows: int = Field(50, ge=1, description="Rows the model sees per query (N+1 fetched).")
    max_cell_chars: int = Field(200, ge=10, description="Longer cells are cut with a marker.")
    max_result_chars: int = Field(10_000, ge=500, description="Cap on one formatted result.")
    max_execution_time: int = Field(30, ge=1, description="Seconds one query may run.")
    max_rows_to_read: int = Field(500_000_000, ge=1, description="Rows one query may read.")
    max_bytes_to_read: int = Field(20_000_000_000, ge=1, description="Bytes one query may read.")
    max_result_rows: int = Field(100_000, ge=1, description="Engine backstop on result rows (break).")
    max_result_bytes: int = Field(200_000_000, ge=1, description="Engine backstop on result bytes (break).")
    max_memory_usage: int = Field(4_000_000_000, ge=1, description="Memory one query may use.")
    max_estimated_rows: int | None = Field(
        None,
        ge=0,
        description="A query of the model's that ClickHouse estimates (EXPLAIN ESTIMATE) would read more rows than "
        "this is not run: the model is told which key and partition filters narrow it. Unset: MAX_ROWS_TO_READ (the "
        "queries the engine's limit would stop anyway); 0: no preflight. At most MAX_ROWS_TO_READ.",
    )
    export_max_rows: int = Field(100_000, ge=1, description="Row cap of a CSV download.")
    export_max_bytes: int = Field(
        200_000_000, ge=1_000, description="Byte cap of a CSV download: it ends at the last whole row that fits."
    )
    export_max_cell_chars: int = Field(
        10_000, ge=100, description="Longer cells of a CSV download are cut by the engine, with a marker."
    )
    export_send_timeout_s: float = Field(
        30.0,
        gt=0,
        description="A CSV download whose client takes longer than this to accept a chunk is broken off (its "
        "query and its share of the engine are given back).",
    )
    export_deadline_s: float = Field(
        600.0, gt=0, description="A CSV download still sending after this long is broken off."
    )
    export_per_client: int = Field(
        2, ge=1, description="CSV downloads one web client may have running at once (per process)."
    )

    # --- what one question may cost the app, whatever its SQL returns (agent/limits.py) ---
    max_result_columns: int = Field(200, ge=1, description="Columns one query may return.")
    max_column_name_chars: int = Field(
        200, ge=10, description="Longer column names are cut (by characters, and to 4 bytes a character)."
    )
    max_column_type_chars: int = Field(500, ge=20, description="Longer column type names are cut likewise.")
    max_queries_per_call: int = Field(
        5, ge=1, description="Queries one execute_sql call may run; the rest are refused."
    )
    max_queries_per_run: int = Field(25, ge=1, description="Queries one question may run in all.")
    max_parallel_queries_per_run: int = Field(
        2,
        ge=1,
        description="Engine connections one question (or all CSV downloads together) may use at once, so one "
        "question cannot take them all.",
    )
    clickhouse_max_concurrent_queries: int = Field(
        4, ge=1, description="Statements the agent runs at once (the embedded engine's connections)."
    )
    max_event_bytes: int = Field(
        1_000_000, ge=10_000, description="Largest streamed event (JSON bytes); previews shrink to fit."
    )
    max_turn_bytes: int = Field(
        4_000_000, ge=100_000, description="Largest stored turn (JSON bytes); its event log and transcript shrink."
    )
    chart_max_rows: int = Field(5_000, ge=10, description="Rows a chart draws (from the query's full result).")
    chart_max_label_chars: int = Field(100, ge=10, description="Longer chart labels are cut by the engine.")
    chart_max_per_run: int = Field(4, ge=1, description="Charts one answer may draw.")
    chart_max_spec_bytes: int = Field(
        500_000, ge=10_000, description="Largest chart spec (JSON bytes); a larger chart is refused: aggregate."
    )
    chart_render_timeout_s: float = Field(
        20.0, gt=0, description="Time one chart's PNG (for Slack) may take to render, in a process of its own."
    )
    schema_max_chars: int = Field(
        24_000,
        ge=1_000,
        description="Budget of the schema prompt section. A schema larger than this goes in as a catalogue "
        "(one line per table) and the model reads columns with the lookup_schema tool.",
    )
    schema_catalogue_max_chars: int = Field(
        16_000,
        ge=1_000,
        description="Budget of the catalogue; past it, the tables that best match each question are added "
        "after the cached prefix, and the lookup tool's search covers the rest.",
    )
    agent_knowledge_dir: str = Field(
        "",
        description="Folder of the team's knowledge files (YAML glossary, metrics, notes and verified queries; "
        "see README). Empty: the demo's `knowledge/` when CLICKHOUSE_DATABASES is the demo's nycflights13, "
        "none otherwise; `none`: no knowledge.",
    )
    agent_knowledge_max_chars: int = Field(
        8_000,
        ge=0,
        description="Budget of the knowledge inside the cached prompt prefix; past it, the entries that match "
        "each question are retrieved and sent beside it.",
    )
    schema_ttl_s: int = Field(600, ge=0, description="How long the rendered schema is reused.")
    agent_access_file: str = Field(
        "",
        description="The policy file (YAML, see README): who may read which tables and rows, per person and "
        "per Slack channel. Empty: one policy for everyone, every table in scope.",
    )

    # --- web ---
    agent_web_reattach_grace_s: float = Field(
        5.0, ge=0, description="Seconds a run goes on with nobody watching before it is cancelled."
    )
    agent_web_token: SecretStr | None = Field(None, description="When set, API routes need it as a bearer.")
    agent_web_rate_per_minute: int = Field(30, ge=1, description="Chats per client per minute.")
    agent_web_max_message_chars: int = Field(10_000, ge=1, description="Longest question accepted.")
    agent_web_exports_per_minute: int = Field(
        30, ge=1, description="CSV downloads per client per minute (a budget of their own, apart from chats)."
    )
    agent_web_thumbs_per_minute: int = Field(
        30, ge=1, description="Thumbs (👍 / 👎 on an answer) per client per minute (a budget of their own)."
    )
    agent_web_schedule_changes_per_minute: int = Field(
        30,
        ge=1,
        description="Schedules made, edited, paused, resumed or deleted, and inbox deliveries marked read "
        "or deleted, per client per minute (a budget of their own).",
    )
    agent_web_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["localhost", "127.0.0.1", "[::1]"],
        description="Comma-separated Host header names the server answers (others get 400, which stops DNS "
        "rebinding); `*.example.com` matches subdomains. Must be set explicitly to serve a non-loopback address.",
    )
    agent_web_trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated IPs or CIDR networks of reverse proxies whose X-Forwarded-For/-Proto are "
        "believed. Default none: the client is the socket's peer, whatever headers it sends.",
    )
    agent_web_allow_no_token: bool = Field(
        False,
        description="Let `agent web` serve a non-loopback address without AGENT_WEB_TOKEN (anyone who can reach "
        "the port can then ask questions and read every conversation).",
    )

    # --- web sign-in (web/identity.py, web/views/auth.py) ---
    agent_oidc_issuer: str | None = Field(
        None,
        description="OpenID Connect issuer URL (its /.well-known/openid-configuration is read); when set, people "
        "sign in to the web chat (authorization code with PKCE) and each sees only their own conversations.",
    )
    agent_oidc_client_id: str | None = Field(None, description="The web chat's client id at the OIDC provider.")
    agent_oidc_client_secret: SecretStr | None = Field(
        None, description="The client's secret at the OIDC provider (none: a public client, PKCE alone)."
    )
    agent_oidc_scopes: str = Field(
        "openid email profile",
        description="Scopes asked of the provider; add `groups` where the provider gives groups that way (Okta, "
        "Keycloak) for policies by OIDC group. The email is used only when the provider says it is verified.",
    )
    agent_session_secret: SecretStr | None = Field(
        None,
        description="Key that signs the sign-in cookie (at least 32 characters; required with AGENT_OIDC_ISSUER). "
        "Changing it signs everyone out.",
    )
    agent_session_hours: float = Field(
        12.0, gt=0, le=24 * 90, description="How long a sign-in lasts (cookie and server-side session), in hours."
    )
    agent_web_identity_header: str | None = Field(
        None,
        description="Trust a reverse proxy's sign-in (oauth2-proxy, Cloudflare Access, IAP): the request header "
        "holding the verified email (e.g. X-Forwarded-Email), believed only from AGENT_WEB_IDENTITY_PROXIES.",
    )
    agent_web_identity_groups_header: str | None = Field(
        None,
        description="With AGENT_WEB_IDENTITY_HEADER: the header holding the person's groups, comma-separated. The "
        "proxy must overwrite both headers on every request: two copies of either are no identity.",
    )
    agent_web_identity_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated IPs or CIDR networks of the proxies that may set AGENT_WEB_IDENTITY_HEADER "
        "(the socket's peer; required with it; `*` or a network wider than a private range is refused). From any "
        "other peer the header is ignored.",
    )

    @field_validator("agent_web_allowed_hosts", mode="before")
    @classmethod
    def _host_names(cls, value: object) -> object:
        names = value.split(",") if isinstance(value, str) else value
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            return names  # the list[str] check reports it
        hosts = []
        for name in (name.strip().lower() for name in names if name.strip()):
            if ":" in name and not name.startswith("["):
                try:
                    name = f"[{ipaddress.IPv6Address(name)}]"  # as a Host header writes an IPv6 address
                except ValueError:
                    raise ValueError(f"{name!r}: list host names without a port") from None
            if "*" in name[1:] or (name.startswith("*") and name != "*" and not name.startswith("*.")):
                raise ValueError(f"{name!r}: a wildcard must be the whole name or lead it, like *.example.com")
            hosts.append(name)
        return hosts

    @field_validator("agent_web_trusted_proxies", "agent_web_identity_proxies", mode="before")
    @classmethod
    def _proxy_networks(cls, value: object) -> object:
        items = [item.strip() for item in value.split(",") if item.strip()] if isinstance(value, str) else value
        for item in items if isinstance(items, list) else []:
            if item != "*":
                try:
                    ipaddress.ip_network(item, strict=False)
                except ValueError:
                    raise ValueError(f"{item!r} is not an IP address or a CIDR network") from None
        return items

    # --- Slack ---
    slack_bot_token: SecretStr | None = Field(None, description="xoxb- token of the Slack app.")
    slack_signing_secret: SecretStr | None = Field(
        None, description="Signing secret of the Slack app; HTTP mode refuses requests not signed with it."
    )
    slack_app_token: SecretStr | None = Field(
        None,
        description="xapp- app-level token (connections:write). When set, the bot connects over Socket Mode "
        "instead of serving /slack/events.",
    )
    slack_api_url: str | None = Field(
        None,
        description="Web API base URL (default https://slack.com/api/); point the Slack SDK at a fake or a gateway.",
    )
    slack_allowed_channels: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated channel IDs the bot answers in; empty: every channel it is a member of. "
        "Direct messages are answered whatever this says.",
    )
    slack_allowed_teams: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Comma-separated workspace (team) IDs the bot answers; empty: any."
    )
    slack_rate_per_minute: int = Field(10, ge=1, description="Questions one Slack user may ask per minute.")
    slack_max_message_chars: int = Field(4_000, ge=1, description="Longest question the Slack bot accepts.")
    slack_progress_interval_s: float = Field(
        1.0,
        gt=0,
        description="Least time between two edits of a Slack progress message or status, and between two pieces "
        "of a streamed answer (Slack allows about one update a second per message).",
    )
    slack_status_refresh_s: float = Field(
        60.0,
        gt=0,
        lt=120,
        description="How often the Slack assistant thread's status is set again while an answer is being "
        "worked on and none of it is posted yet (Slack removes a status after two minutes without a message, "
        "and when the app replies).",
    )
    agent_web_url: str | None = Field(
        None,
        description="Public URL of the web chat (e.g. https://analyst.example.com); when set, Slack answers link "
        "each query to its page there (its SQL, preview and CSV).",
    )
    agent_example_questions: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Example questions shown on the web page's empty state and as Slack's suggested prompts: a "
        "JSON array, or questions separated by `|`. Empty: generated once per schema version from the schema "
        "(cached in AGENT_DATA_DIR/examples), or a generic few when that fails.",
    )

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    agent_retention_days: float | None = Field(
        None,
        gt=0,
        description="Off by default. Days after which conversations, their answers, events and thumbs, proposals, "
        "audit entries and expired sessions are deleted from the state file (swept at start-up and hourly).",
    )

    agent_log_format: Literal["text", "json"] = Field(
        "text",
        description="`json`: one JSON object a line (time, level, logger, message, run id, interface, and for "
        "each finished run its outcome and timings). A question's text is logged only at DEBUG.",
    )

    # --- schedules (chats/schedules.py, process/scheduler.py) ---
    agent_scheduler: bool = Field(
        True,
        description="Whether `agent serve` fires scheduled questions and alerts (every worker may: each fire "
        "is claimed by one). Off: schedules are kept, and fire once a server with it on runs.",
    )
    agent_schedule_tick_s: float = Field(
        30.0, gt=0, description="How often the scheduler looks for schedules whose time has come."
    )
    agent_schedule_late_after_s: float = Field(
        300.0,
        ge=0,
        description="A fire that runs more than this after its time (the server was down) runs once and says "
        "it is late; fires missed meanwhile are not made up one by one.",
    )
    agent_schedule_retries: int = Field(
        4, ge=0, description="Further tries of a delivery that failed, before its owner is told it did not arrive."
    )
    agent_schedule_min_interval_s: float = Field(
        900.0,
        ge=0,
        description="The shortest time between two fires a schedule's cadence may have (checked as it is made "
        "or edited, on the web, in Slack and the CLI): each fire runs queries, or asked afresh a model call.",
    )
    agent_schedule_retry_s: float = Field(
        60.0, gt=0, description="The wait before a failed delivery's first retry; it doubles at each further try."
    )

    # --- serving ---
    agent_shutdown_grace_s: float = Field(
        30.0,
        ge=0,
        description="On SIGTERM, how long answers already running get to finish (and be stored) before they are "
        "cancelled; new questions are refused meanwhile. Keep it below the orchestrator's kill timeout "
        "(docker compose: stop_grace_period).",
    )
    agent_run_lease_s: float = Field(
        15.0,
        gt=0,
        le=3600,
        description="On PostgreSQL (several hosts), how long a host's hold on a running answer lasts unless it "
        "renews it (it does, three times a lease): a host that dies has its answers taken over by another once "
        "this lapses, which bounds how long the takeover takes.",
    )
    agent_run_max_resumes: int = Field(
        2,
        ge=0,
        description="How many times one answer may be taken over after its host died; past it (or past "
        "AGENT_RUN_RESUME_MAX_AGE_S) it ends with a message asking to ask again.",
    )
    agent_run_resume_max_age_s: float = Field(
        900.0,
        gt=0,
        description="An answer started longer ago than this is not taken over when its host dies: it ends with "
        "a message asking to ask again.",
    )

    @field_validator("agent_model", "agent_followup_model", "agent_judge_model")
    @classmethod
    def _model_list(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or not value.strip():  # docker compose passes `VAR=` for one it does not set
            return {"agent_model": DEFAULT_MODEL, "agent_followup_model": DEFAULT_FOLLOWUP_MODEL}.get(
                info.field_name or ""
            )
        parse_models(value)
        return ",".join(part.strip() for part in value.split(","))

    @field_validator(
        "anthropic_api_key",
        "openai_api_key",
        "slack_bot_token",
        "slack_signing_secret",
        "slack_app_token",
        "agent_web_token",
        "agent_oidc_client_secret",
        "agent_session_secret",
        "agent_oidc_issuer",
        "agent_oidc_client_id",
        "agent_web_identity_header",
        "agent_web_identity_groups_header",
        mode="before",
    )
    @classmethod
    def _empty_secret_is_unset(cls, value: object) -> object:
        # docker compose passes `VAR=` for a variable that is not set in its environment.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator(
        "clickhouse_databases",
        "clickhouse_exclude_tables",
        "slack_allowed_channels",
        "slack_allowed_teams",
        mode="before",
    )
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("agent_example_questions", mode="before")
    @classmethod
    def _questions(cls, value: object) -> object:
        if isinstance(value, str):
            if value.strip().startswith("["):
                import json

                try:
                    return json.loads(value)
                except ValueError:
                    raise ValueError("not a valid JSON array of strings") from None
            return [item.strip() for item in value.split("|") if item.strip()]
        return value

    @field_validator("clickhouse_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if value and urlsplit(value).scheme not in ("chdb", "http", "https"):
            raise ValueError("must start with chdb://, http:// or https://")
        if value.startswith("chdb:") and not urlsplit(value).path:
            raise ValueError("chdb:// needs a directory, e.g. chdb:///var/lib/agent/clickhouse")
        return value

    @field_validator("agent_state_url")
    @classmethod
    def _check_state_url(cls, value: str) -> str:
        value = value.strip()
        scheme = urlsplit(value).scheme
        if scheme == "sqlite":
            if not urlsplit(value).path:
                raise ValueError("sqlite:// needs a file, e.g. sqlite:///var/lib/agent/state.sqlite3")
            return urlsplit(value).path
        if scheme and scheme not in ("postgresql", "postgres") and len(scheme) > 1:  # C:\ is a path
            raise ValueError("must be a file path, sqlite:///path or postgresql://...")
        return value

    @field_validator("agent_web_url")
    @classmethod
    def _check_web_url(cls, value: str | None) -> str | None:
        if not value or not value.strip():  # docker compose passes `VAR=` for one it does not set
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ValueError("must be the web chat's address, e.g. https://analyst.example.com (no ? or #)")
        return parts.geturl()  # urlsplit writes the scheme in lower case (it is case-blind): HTTPS:// is https://

    @model_validator(mode="after")
    def _estimate_within_the_limit(self) -> Settings:
        if self.max_estimated_rows is not None and self.max_estimated_rows > self.max_rows_to_read:
            raise ValueError("MAX_ESTIMATED_ROWS must be at most MAX_ROWS_TO_READ (the engine stops those anyway)")
        return self

    @property
    def preflight_max_rows(self) -> int:
        """The preflight's threshold in effect (0: no preflight)."""
        return self.max_rows_to_read if self.max_estimated_rows is None else self.max_estimated_rows

    @model_validator(mode="after")
    def _sign_in_complete(self) -> Settings:
        if self.agent_oidc_issuer:
            if not self.agent_oidc_client_id:
                raise ValueError("AGENT_OIDC_CLIENT_ID must be set with AGENT_OIDC_ISSUER")
            secret = self.agent_session_secret.get_secret_value() if self.agent_session_secret else ""
            if len(secret) < 32:
                raise ValueError("AGENT_SESSION_SECRET must be set, at least 32 characters, with AGENT_OIDC_ISSUER")
        if self.agent_web_identity_header and not self.agent_web_identity_proxies:
            raise ValueError("AGENT_WEB_IDENTITY_PROXIES must list the proxies that set AGENT_WEB_IDENTITY_HEADER")
        if any(item == "*" or covers_the_internet(item) for item in self.agent_web_identity_proxies):
            raise ValueError(  # anyone could then say who they are
                "AGENT_WEB_IDENTITY_PROXIES must name the proxies; `*` (or a network wider than a private "
                "range, like 0.0.0.0/0 or ::/0) would let any client set the header"
            )
        return self

    @property
    def web_sign_in(self) -> bool:
        """Whether people sign in to the web chat (OIDC, or a trusted proxy's header)."""
        return bool(self.agent_oidc_issuer or self.agent_web_identity_header)

    @model_validator(mode="after")
    def _default_url(self) -> Settings:
        if not self.clickhouse_url:
            self.clickhouse_url = f"chdb://{(self.agent_data_dir / 'clickhouse').resolve()}"
        return self

    def models(self, role: Role) -> tuple[ModelRef, ...]:
        """The ordered model list of a role."""
        text = {"main": self.agent_model, "followup": self.agent_followup_model, "judge": self.agent_judge_model}[role]
        return parse_models(text or self.agent_model)

    def missing_model_key(self, roles: tuple[Role, ...] = ("main", "followup")) -> str | None:
        """What keeps the models of these roles from being asked, in one line (None: nothing known)."""
        used = {ref.provider for role in roles for ref in self.models(role)}
        if "anthropic" in used and self.anthropic_api_key is None:
            return MISSING_ANTHROPIC_KEY
        if "openai" in used and self.openai_api_key is None and not self.openai_base_url:
            return "OPENAI_API_KEY is not set; `openai:` models on OpenAI's API need it (or set OPENAI_BASE_URL)."
        if "vertex" in used and not (self.cloud_ml_region and self.anthropic_vertex_project_id):
            return "CLOUD_ML_REGION and ANTHROPIC_VERTEX_PROJECT_ID must be set for `vertex:` models."
        return None

    @property
    def knowledge_dir(self) -> Path | None:
        """The knowledge folder in effect (AGENT_KNOWLEDGE_DIR, or the demo's for the demo data)."""
        if self.agent_knowledge_dir.strip().lower() == "none":
            return None
        if self.agent_knowledge_dir.strip():
            return Path(self.agent_knowledge_dir.strip())
        demo = self.clickhouse_databases == ["nycflights13"] and DEMO_KNOWLEDGE_DIR.is_dir()  # not in a wheel
        return DEMO_KNOWLEDGE_DIR if demo else None

    @property
    def access_file(self) -> Path | None:
        """The policy file in effect (AGENT_ACCESS_FILE), or None: one open policy for everyone."""
        return Path(self.agent_access_file.strip()) if self.agent_access_file.strip() else None

    @property
    def embedded(self) -> bool:
        return self.clickhouse_url.startswith("chdb:")

    @property
    def chdb_path(self) -> Path:
        return Path(urlsplit(self.clickhouse_url).path)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            if name in ("clickhouse_url", "agent_state_url"):
                value = redacted_url(value)
            yield name, value

    def clickhouse_password(self) -> str | None:
        return urlsplit(self.clickhouse_url).password

    def redacted_clickhouse_url(self) -> str:
        return redacted_url(self.clickhouse_url)


def redacted_url(url: str) -> str:
    """`url` with its password, if any, as ***."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url


def load_settings(**overrides: object) -> Settings:
    """Read settings, turning a validation failure into one line naming the variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]).upper() if first["loc"] else "settings"
        raise ConfigError(f"{name}: {first['msg']}") from None
    except SettingsError as exc:
        # Python's re is safe here: the operator's own environment, and a literal before one repeat.
        match = re.search(r'field "(\w+)"', str(exc))
        name = match.group(1).upper() if match else "settings"
        raise ConfigError(f"{name}: could not be parsed") from None
