"""Schema migrations of the keeper component (see keeper.store.migrations).

Three tables make sends idempotent across crashes:
- ``keeper_intents``: one row per (chain, contract, subject, action), written
  before anything is signed; its UNIQUE key is what makes "exactly once" hold
  for one keeper even when it restarts mid-send.
- ``keeper_attempts``: one row per signed transaction (a nonce may carry
  several: fee bumps and cancels), written BEFORE broadcast with its raw bytes,
  so a restart can look up every hash it may have sent and resend the same
  bytes rather than signing something new.
- ``keeper_attempt_intents``: which intents ride on which attempt (a Multicall3
  batch carries many).

Migration 3 adds a claim to each intent (``keeper.store.claims``): several
keepers on one database, each with its own signer, act on an intent only
while they hold its claim.

``keeper_dialects`` (migration 2) records the dialect found for each configured
contract at the last start-up (``keeper.act.detect``), for ``keeper status``.

Migration 4 (SQLite only): a change to an intent, in a column a detail
shows, raises its subject's version (``subject_versions``, the index
component's), so a subject's version stamps its whole detail.

Fees and values are TEXT (decimal) like every uint256 in this database.
"""

from keeper.store.migrations import Migration, version_triggers

MIGRATIONS: list[Migration] = [
    """
    CREATE TABLE keeper_intents (
        id INTEGER PRIMARY KEY,
        chain_id INTEGER NOT NULL,
        contract TEXT NOT NULL,
        subject TEXT NOT NULL,
        action TEXT NOT NULL,
        protocol TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('open', 'inflight', 'done')),
        outcome TEXT CHECK (outcome IN ('confirmed', 'preempted', 'not_permitted',
            'reverted_in_simulation', 'reverted', 'dropped', 'fee_cap')),
        detail TEXT,
        due_at INTEGER NOT NULL,
        decided_block INTEGER NOT NULL,
        decided_hash TEXT NOT NULL,
        tx_hash TEXT,
        receipt_block INTEGER,
        receipt_hash TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        UNIQUE (chain_id, contract, subject, action)
    );
    CREATE INDEX keeper_intents_status ON keeper_intents (chain_id, status);
    CREATE TABLE keeper_attempts (
        id INTEGER PRIMARY KEY,
        chain_id INTEGER NOT NULL,
        signer TEXT NOT NULL,
        nonce INTEGER NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('call', 'batch', 'cancel')),
        to_address TEXT NOT NULL,
        data TEXT NOT NULL,
        max_fee TEXT NOT NULL,
        tip TEXT NOT NULL,
        gas_limit INTEGER NOT NULL,
        raw_tx TEXT NOT NULL,
        tx_hash TEXT NOT NULL UNIQUE,
        status TEXT NOT NULL CHECK (status IN ('signed', 'sent', 'mined', 'confirmed',
            'replaced', 'dropped', 'failed')),
        sent_block INTEGER,
        sent_at REAL,
        receipt_block INTEGER,
        receipt_hash TEXT,
        receipt_status INTEGER,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX keeper_attempts_nonce ON keeper_attempts (chain_id, signer, nonce);
    CREATE INDEX keeper_attempts_status ON keeper_attempts (chain_id, status);
    CREATE TABLE keeper_attempt_intents (
        attempt_id INTEGER NOT NULL REFERENCES keeper_attempts (id),
        intent_id INTEGER NOT NULL REFERENCES keeper_intents (id),
        PRIMARY KEY (attempt_id, intent_id)
    );
    CREATE INDEX keeper_attempt_intents_intent ON keeper_attempt_intents (intent_id)
    """,
    """
    CREATE TABLE keeper_dialects (
        chain_id INTEGER NOT NULL,
        contract TEXT NOT NULL,
        name TEXT NOT NULL,
        protocol TEXT NOT NULL,
        dialect TEXT,
        source TEXT NOT NULL CHECK (source IN ('detected', 'pinned')),
        diamond INTEGER NOT NULL,
        revision INTEGER,
        reason TEXT NOT NULL,
        detected_at REAL NOT NULL,
        PRIMARY KEY (chain_id, contract)
    )
    """,
    # 3: keepers sharing one database claim intents (keeper.store.claims): the claimant
    # (a signer address) and until when, in seconds by the database clock
    """
    ALTER TABLE keeper_intents ADD COLUMN claimed_by TEXT;
    ALTER TABLE keeper_intents ADD COLUMN claim_expires DOUBLE PRECISION;
    CREATE INDEX keeper_intents_claims ON keeper_intents (chain_id, claimed_by)
    """,
    # 4: (SQLite) an intent's change, in what a detail shows of it, raises its subject's
    # version (keeper.store.subjects: the detail's intents)
    version_triggers(
        "keeper_intents",
        "subject",
        ("action", "status", "outcome", "detail", "due_at", "tx_hash", "receipt_block", "attempts"),
    ),
]
