"""The provider clients the settings ask for; one that cannot be asked says which setting or package is
missing when it is called (a server still starts and /readyz says why)."""

from __future__ import annotations

import importlib.util

import pytest

from agent.llm import LLMClient, LLMConfigError, OpenAIProvider, UnconfiguredProvider
from agent.llm.providers import providers_for
from tests.conftest import make_settings


async def _ignore(*_: object) -> None:
    return None


@pytest.mark.skipif(importlib.util.find_spec("botocore") is not None, reason="the AWS SDK is installed here")
async def test_bedrock_without_the_aws_sdk_says_how_to_install_it() -> None:
    llm = LLMClient.from_settings(make_settings(agent_model="bedrock:anthropic.claude-x", anthropic_api_key="k"))
    try:
        with pytest.raises(LLMConfigError, match=r"pip install 'clickhouse-analyst\[bedrock\]'"):
            await llm.stream_turn(model="bedrock:anthropic.claude-x", on_text=_ignore, on_restart=_ignore, messages=[])
    finally:
        await llm.close()


def test_vertex_without_its_region_and_project_is_named() -> None:
    settings = make_settings(agent_model="vertex:claude-sonnet-5-5", anthropic_api_key="k")
    (provider,) = providers_for(settings, ["vertex"]).values()
    assert isinstance(provider, UnconfiguredProvider) and "CLOUD_ML_REGION" in provider.reason
    assert (
        settings.missing_model_key()
        == "CLOUD_ML_REGION and ANTHROPIC_VERTEX_PROJECT_ID must be set for `vertex:` models."
    )


def test_a_local_openai_compatible_server_needs_no_key() -> None:
    settings = make_settings(agent_model="openai:qwen", openai_base_url="http://127.0.0.1:11434/v1")
    (provider,) = providers_for(settings, ["openai"]).values()
    assert isinstance(provider, OpenAIProvider)
    assert (
        settings.missing_model_key() == "ANTHROPIC_API_KEY is not set; the agent needs it to ask the model."
    )  # follow-ups
    assert (
        make_settings(
            agent_model="openai:qwen", agent_followup_model="openai:qwen", openai_base_url="http://x/v1"
        ).missing_model_key()
        is None
    )
