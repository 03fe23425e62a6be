"""Build a ``Verifier`` from the ``[verdicts]`` configuration section."""

from __future__ import annotations

from keeper.config import DirectorySourceConfig, SourceConfig, VerdictsConfig
from keeper.errors import ConfigError
from keeper.verify.checks import CheckConfig
from keeper.verify.sandbox import Sandbox
from keeper.verify.sources import (
    CONTENT_FILE_NAMES,
    ContentSource,
    DirectorySource,
    HttpSource,
    Source,
)
from keeper.verify.verifier import RetryPolicy, Verifier


def verdict_source(cfg: SourceConfig) -> Source:
    """One verdict source: an HTTP template with a pointer, or a directory."""
    if isinstance(cfg, DirectorySourceConfig):
        return DirectorySource(cfg.path)
    return HttpSource(cfg.url, cfg.pointer, cfg.timeout, cfg.max_bytes)


def content_source(cfg: SourceConfig) -> Source:
    """One content source: raw bytes over HTTP, or files named by the deliverable hash."""
    if isinstance(cfg, DirectorySourceConfig):
        return DirectorySource(cfg.path, CONTENT_FILE_NAMES)
    if cfg.pointer:
        raise ConfigError(
            "verdicts.content_sources: content is raw bytes, a pointer makes no sense"
        )
    return ContentSource(cfg.url, cfg.timeout, cfg.max_bytes)


def build_verifier(cfg: VerdictsConfig) -> Verifier:
    """Sources in configured order, evaluator names, retry horizon, a sandbox for re-runs."""
    return Verifier(
        sources=[verdict_source(s) for s in cfg.sources],
        content_sources=[content_source(s) for s in cfg.content_sources],
        checks=CheckConfig(evaluator_names={k: v.lower() for k, v in cfg.evaluators.items()}),
        policy=RetryPolicy(horizon=cfg.retry_horizon),
        sandbox=Sandbox(),
    )
