from __future__ import annotations

import json
import typing

import pytest
from anthropic.types import ModelParam

from agent.config import DEFAULT_FOLLOWUP_MODEL, DEFAULT_MODEL, ConfigError, Settings, load_settings


def test_default_models_are_in_the_installed_sdks_model_list() -> None:
    known = typing.get_args(typing.get_args(ModelParam)[0])
    assert DEFAULT_MODEL in known and DEFAULT_FOLLOWUP_MODEL in known


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MAX_ROWS", "many", "MAX_ROWS: Input should be a valid integer"),
        ("CLICKHOUSE_URL", "mysql://x", "CLICKHOUSE_URL: Value error, must start with chdb://"),
        ("AGENT_MAX_ROUNDS", "1", "AGENT_MAX_ROUNDS: Input should be greater than or equal to 2"),
        ("LOG_LEVEL", "LOUD", "LOG_LEVEL:"),
        ("AGENT_WEB_URL", "https://a.example/?x=1", "AGENT_WEB_URL: Value error, must be the web chat's address"),
        ("AGENT_WEB_URL", "analyst.example.com", "AGENT_WEB_URL: Value error, must be the web chat's address"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_embedded_default_lives_in_the_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("AGENT_DATA_DIR", str(tmp_path))
    settings = load_settings()
    assert settings.embedded and settings.chdb_path == tmp_path.resolve() / "clickhouse"


def test_secrets_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("CLICKHOUSE_URL", "https://agent:hunter2@ch.example:8443/db")
    settings = load_settings()
    assert "sk-ant-secret" not in repr(settings) and "hunter2" not in settings.redacted_clickhouse_url()
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings)
    assert settings.anthropic_api_key is not None and settings.anthropic_api_key.get_secret_value() == "sk-ant-secret"


def test_every_setting_is_documented() -> None:
    undocumented = [name for name, field in Settings.model_fields.items() if not field.description]
    assert undocumented == []


def test_an_empty_api_key_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """docker compose passes `ANTHROPIC_API_KEY=` when the variable is not set."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")
    assert load_settings().anthropic_api_key is None


def test_ask_without_a_key_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from process.cli import main

    monkeypatch.setenv("ANTHROPIC_API_KEY", "")
    assert main(["ask", "how many flights?", "--json"]) == 2
    out, err = capsys.readouterr()
    assert err.strip() == "error: ANTHROPIC_API_KEY is not set; the agent needs it to ask the model."
    assert json.loads(out) == {"error": "ANTHROPIC_API_KEY is not set; the agent needs it to ask the model."}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("claude-sonnet-5-5,", "AGENT_MODEL: Value error, 'claude-sonnet-5-5,': an empty entry"),
        ("azure:gpt-5", "AGENT_MODEL: Value error, 'azure:gpt-5': unknown provider 'azure'"),
        ("openai:", "AGENT_MODEL: Value error, 'openai:': the model name after openai: is empty"),
        ("a,a", "AGENT_MODEL: Value error, 'a' is listed twice"),
    ],
)
def test_a_bad_model_list_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv("AGENT_MODEL", value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_model_lists_name_a_provider_or_default_to_anthropic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_MODEL", " claude-sonnet-5-5 , bedrock:anthropic.claude-x ,openai:llama3.1:8b")
    settings = load_settings()
    assert [str(ref) for ref in settings.models("main")] == [
        "anthropic:claude-sonnet-5-5",
        "bedrock:anthropic.claude-x",
        "openai:llama3.1:8b",  # Ollama's names hold a colon: only the first one separates the provider
    ]
    assert settings.models("judge") == settings.models("main")  # unset: the judge uses AGENT_MODEL
    assert [str(ref) for ref in settings.models("followup")] == [f"anthropic:{DEFAULT_FOLLOWUP_MODEL}"]


def test_the_missing_key_is_the_one_the_configured_providers_need(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_MODEL", "openai:llama3.1:8b")
    monkeypatch.setenv("AGENT_FOLLOWUP_MODEL", "openai:llama3.1:8b")
    assert load_settings().missing_model_key() == (
        "OPENAI_API_KEY is not set; `openai:` models on OpenAI's API need it (or set OPENAI_BASE_URL)."
    )
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")  # a local server needs no key
    assert load_settings().missing_model_key() is None


def test_an_empty_model_list_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """docker compose passes `AGENT_MODEL=` when .env leaves it empty."""
    monkeypatch.setenv("AGENT_MODEL", "")
    monkeypatch.setenv("AGENT_FOLLOWUP_MODEL", " ")
    settings = load_settings()
    assert (settings.agent_model, settings.agent_followup_model) == (DEFAULT_MODEL, DEFAULT_FOLLOWUP_MODEL)
