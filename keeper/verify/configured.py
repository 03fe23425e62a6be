"""Build a ``Verifier`` from the ``[verdicts]`` configuration section.

The daemon passes its database connection: documents posted to
``POST /v1/verdicts`` are then the first source (already matched to an
on-chain reason, and local), ahead of the configured ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from keeper.config import DirectorySourceConfig, SourceConfig, VerdictsConfig
from keeper.errors import ConfigError
from keeper.obs.metrics import Metrics
from keeper.store.db import Db
from keeper.verify.checks import CheckConfig
from keeper.verify.github_api import OUTCOMES, GitHubClient
from keeper.verify.sandbox import Sandbox
from keeper.verify.sources import (
    CONTENT_FILE_NAMES,
    ContentSource,
    DirectorySource,
    HttpSource,
    Source,
)
from keeper.verify.submission import StoredDocumentSource
from keeper.verify.verdict import RetryPolicy, Verifier


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


def build_verifier(
    cfg: VerdictsConfig,
    conn: Db | None = None,
    environ: Mapping[str, str] | None = None,
    metrics: Metrics | None = None,
) -> Verifier:
    """Posted documents (given ``conn``), sources in configured order, evaluator names,
    retry horizon, a sandbox for re-runs, and GitHub's API when ``[verdicts.github]`` is set."""
    stored: list[Source] = [StoredDocumentSource(conn)] if conn is not None else []
    github = None
    if cfg.github is not None:
        environ = os.environ if environ is None else environ
        observe = _count_github(metrics) if metrics is not None else None
        github = GitHubClient.from_config(cfg.github, environ, observe)
    return Verifier(
        sources=[*stored, *(verdict_source(s) for s in cfg.sources)],
        content_sources=[content_source(s) for s in cfg.content_sources],
        checks=CheckConfig(evaluator_names={k: v.lower() for k, v in cfg.evaluators.items()}),
        policy=RetryPolicy(horizon=cfg.retry_horizon),
        sandbox=Sandbox(),
        github=github,
    )


def _count_github(metrics: Metrics) -> Callable[[str], None]:
    """GitHub request outcomes into ``keeper_github_requests_total``, every series from zero."""
    counter = metrics.github_requests
    for outcome in OUTCOMES:
        counter.labels(outcome=outcome)
    return lambda outcome: counter.labels(outcome=outcome).inc()
