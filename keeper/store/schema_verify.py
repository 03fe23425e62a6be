"""Schema migrations of the verify component (see keeper.store.migrations).

``verifications`` holds the latest verification of each verdict, keyed by
(chain, contract, job), with the coordinates of the verdict event it checked
so that a reorg removing the event removes the verification.
``verification_reports`` keeps every revision of the report chain.
``verdict_documents`` keeps the canonical bytes of documents whose digest was
computed, so a verdict can be shown and re-checked without the source; its
``origin`` says how it got there (``api``: posted to ``POST /v1/verdicts``,
``source``: fetched from a configured source).
Migration 3 (SQLite only): any change to a verification raises its job's
version (``subject_versions``, the index component's), so a job's version
stamps its whole detail.
Migration 4: the retry index leads with the chain, as the verifier's query does.
Retry times are unix seconds (wall clock: they pace network fetches, not
chain deadlines).
"""

from keeper.store.migrations import Migration, version_triggers

MIGRATIONS: list[Migration] = [
    """
    CREATE TABLE verifications (
        chain_id INTEGER NOT NULL,
        contract TEXT NOT NULL,
        job_id TEXT NOT NULL,
        status TEXT NOT NULL,
        failures_json TEXT NOT NULL,
        document_digest TEXT,
        report_json TEXT NOT NULL,
        report_digest TEXT NOT NULL,
        parent_digest TEXT,
        revision_count INTEGER NOT NULL,
        event_name TEXT NOT NULL,
        tx_hash TEXT NOT NULL,
        block_hash TEXT NOT NULL,
        block_number INTEGER NOT NULL,
        log_index INTEGER NOT NULL,
        attempts INTEGER NOT NULL,
        first_attempt_at INTEGER NOT NULL,
        next_retry_at INTEGER,
        PRIMARY KEY (chain_id, contract, job_id)
    );
    CREATE INDEX verifications_event ON verifications (chain_id, block_hash, log_index);
    CREATE INDEX verifications_block ON verifications (chain_id, block_number);
    CREATE INDEX verifications_retry ON verifications (next_retry_at)
        WHERE next_retry_at IS NOT NULL;
    CREATE TABLE verification_reports (
        chain_id INTEGER NOT NULL,
        contract TEXT NOT NULL,
        job_id TEXT NOT NULL,
        revision_count INTEGER NOT NULL,
        report_digest TEXT NOT NULL,
        parent_digest TEXT,
        status TEXT NOT NULL,
        report_json TEXT NOT NULL,
        PRIMARY KEY (chain_id, contract, job_id, revision_count)
    );
    CREATE INDEX verification_reports_digest ON verification_reports (report_digest);
    CREATE TABLE verdict_documents (
        chain_id INTEGER NOT NULL,
        contract TEXT NOT NULL,
        job_id TEXT NOT NULL,
        digest TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (chain_id, contract, job_id, digest)
    );
    CREATE INDEX verdict_documents_digest ON verdict_documents (digest)
    """,
    """
    ALTER TABLE verdict_documents ADD COLUMN origin TEXT NOT NULL DEFAULT 'source'
    """,
    # 3: (SQLite) a verification's change raises its job's version
    version_triggers("verifications", "job_id", None),
    # 4: the retries due, found by a seek on the chain and the retry time (every pass of
    # the verifier asks): on the retry time alone the planner took the chain's index and
    # sorted every verification of the chain each pass, quadratic over a catch-up
    """
    DROP INDEX verifications_retry;
    CREATE INDEX verifications_retry ON verifications (chain_id, next_retry_at)
        WHERE next_retry_at IS NOT NULL
    """,
]
