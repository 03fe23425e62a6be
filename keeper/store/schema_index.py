"""Schema migrations of the index component (see keeper.store.migrations).

``events`` is the source of truth; ``jobs`` and ``tasks`` are projections
rebuilt from events plus ``chain_reads``. uint256 amounts are TEXT (decimal)
so nothing is ever rounded through a float or overflows SQLite's int64;
timestamps and deadlines are INTEGER, saturated at 2**63-1 by the store
(a deadline that far out means "never").

Projection indexes serve the API filters: status through ``*_status_page``,
status with contract through ``*_contract_status_page`` (both in page order),
contract alone through the primary key, parties through their own index, and
newest-first pages through ``*_order``. Each index costs every batch an insert
per touched subject, so there is no more than that (migration 7 dropped the
``*_status`` ones those two made redundant).
"""

from keeper.store.migrations import ByDialect, Migration

MIGRATIONS: list[Migration] = [
    """
    CREATE TABLE events (
        chain_id INTEGER NOT NULL,
        block_hash TEXT NOT NULL,
        log_index INTEGER NOT NULL,
        block_number INTEGER NOT NULL,
        block_timestamp INTEGER NOT NULL,
        tx_hash TEXT NOT NULL,
        tx_index INTEGER NOT NULL,
        contract TEXT NOT NULL,
        protocol TEXT NOT NULL,
        name TEXT,
        variant TEXT NOT NULL,
        subject TEXT,
        args_json TEXT NOT NULL,
        topics_json TEXT NOT NULL,
        data_hex TEXT NOT NULL,
        PRIMARY KEY (chain_id, block_hash, log_index)
    );
    CREATE INDEX events_subject ON events (chain_id, contract, subject, block_number, log_index);
    CREATE INDEX events_block ON events (chain_id, block_number);
    CREATE TABLE blocks (
        chain_id INTEGER NOT NULL,
        number INTEGER NOT NULL,
        hash TEXT NOT NULL,
        parent_hash TEXT NOT NULL,
        timestamp INTEGER NOT NULL,
        PRIMARY KEY (chain_id, number)
    );
    CREATE TABLE cursor (
        chain_id INTEGER PRIMARY KEY,
        indexed_block INTEGER NOT NULL,
        indexed_hash TEXT NOT NULL,
        finalized_block INTEGER NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE chain_reads (
        chain_id INTEGER NOT NULL,
        contract TEXT NOT NULL,
        subject TEXT NOT NULL,
        kind TEXT NOT NULL,
        block_number INTEGER NOT NULL,
        block_hash TEXT NOT NULL,
        result_json TEXT NOT NULL,
        PRIMARY KEY (chain_id, contract, subject, kind, block_hash)
    );
    CREATE INDEX chain_reads_block ON chain_reads (chain_id, block_number);
    CREATE TABLE jobs (
        chain_id INTEGER NOT NULL,
        contract TEXT NOT NULL,
        job_id TEXT NOT NULL,
        client TEXT NOT NULL,
        provider TEXT NOT NULL,
        evaluator TEXT NOT NULL,
        hook TEXT NOT NULL,
        token TEXT NOT NULL,
        budget TEXT NOT NULL,
        funded_amount TEXT NOT NULL,
        expired_at INTEGER NOT NULL,
        submitted_at INTEGER,
        status TEXT NOT NULL,
        status_code INTEGER NOT NULL,
        deliverable TEXT,
        reason TEXT,
        description TEXT,
        legacy INTEGER NOT NULL,
        created_block INTEGER NOT NULL,
        updated_block INTEGER NOT NULL,
        verdict_event TEXT,
        refunded_amount TEXT NOT NULL,
        paid_amount TEXT NOT NULL,
        PRIMARY KEY (chain_id, contract, job_id)
    );
    CREATE INDEX jobs_status ON jobs (status, contract);
    CREATE INDEX jobs_client ON jobs (client);
    CREATE INDEX jobs_provider ON jobs (provider);
    CREATE INDEX jobs_evaluator ON jobs (evaluator);
    CREATE INDEX jobs_order ON jobs (created_block, contract, job_id);
    CREATE TABLE tasks (
        chain_id INTEGER NOT NULL,
        contract TEXT NOT NULL,
        task_id TEXT NOT NULL,
        requester TEXT NOT NULL,
        worker TEXT,
        reward TEXT NOT NULL,
        mode TEXT NOT NULL,
        expiry_time INTEGER NOT NULL,
        status TEXT NOT NULL,
        status_code INTEGER NOT NULL,
        deliverable TEXT,
        evaluator TEXT,
        evaluator_stake TEXT NOT NULL,
        evaluator_fee_bps INTEGER NOT NULL,
        evaluation_window INTEGER NOT NULL,
        appeal_window INTEGER NOT NULL,
        dispute_resolver TEXT,
        submitted_at INTEGER,
        evaluation_deadline INTEGER,
        evaluated_at INTEGER,
        appeal_deadline INTEGER,
        verdict_type INTEGER,
        score INTEGER,
        evidence_hash TEXT,
        paid_amount TEXT NOT NULL,
        refunded_amount TEXT NOT NULL,
        created_block INTEGER NOT NULL,
        updated_block INTEGER NOT NULL,
        extra_json TEXT NOT NULL,
        PRIMARY KEY (chain_id, contract, task_id)
    );
    CREATE INDEX tasks_status ON tasks (status, contract);
    CREATE INDEX tasks_requester ON tasks (requester);
    CREATE INDEX tasks_worker ON tasks (worker);
    CREATE INDEX tasks_evaluator ON tasks (evaluator);
    CREATE INDEX tasks_order ON tasks (created_block, contract, task_id)
    """,
    # 2: list pages filtered by contract and/or status come out of an index already in
    # page order, instead of sorting every matching row per request
    """
    CREATE INDEX jobs_contract_status_page ON jobs (contract, status, created_block, job_id);
    CREATE INDEX jobs_status_page ON jobs (status, created_block, contract, job_id);
    CREATE INDEX tasks_contract_status_page ON tasks (contract, status, created_block, task_id);
    CREATE INDEX tasks_status_page ON tasks (status, created_block, contract, task_id)
    """,
    # 3: the ERC8183.sol dialect's job fields: partial settlement, payout receiver, the
    # pending claim (its cumulative amount), and the dialect the job's events are in
    """
    ALTER TABLE jobs ADD COLUMN settled_amount TEXT NOT NULL DEFAULT '0';
    ALTER TABLE jobs ADD COLUMN payout_receiver TEXT;
    ALTER TABLE jobs ADD COLUMN pending_claim_amount TEXT;
    ALTER TABLE jobs ADD COLUMN dialect TEXT NOT NULL DEFAULT ''
    """,
    # 4: the status page's pictures. Events by kind and block time, covering the
    # subject (each chart reads one window of a few event kinds and joins the
    # projections by primary key, never touching the events table); jobs by refund
    # deadline (the timeline of what falls due); and each token's decimals() and
    # symbol(), read once from the chain. A token that did not answer has NULL
    # decimals and symbol: its amounts stay in base units.
    """
    CREATE INDEX events_kind_time ON events (chain_id, name, block_timestamp, contract, subject);
    CREATE INDEX jobs_due ON jobs (status, expired_at);
    CREATE TABLE token_meta (
        chain_id INTEGER NOT NULL,
        token TEXT NOT NULL,
        decimals INTEGER,
        symbol TEXT,
        read_block INTEGER NOT NULL,
        PRIMARY KEY (chain_id, token)
    )
    """,
    # 5: where each read's state came from: the event's block, or (for fields that never
    # change) the finalized block or the head, on a node that keeps no historical state.
    # A read that could not be had at all has source 'missing', its result error and reason.
    """
    ALTER TABLE chain_reads ADD COLUMN source TEXT NOT NULL DEFAULT 'event block';
    CREATE INDEX chain_reads_missing ON chain_reads (chain_id, contract, kind)
        WHERE source = 'missing'
    """,
    # 6: who indexes each chain when several daemons share the database
    # (keeper.store.leases): times are seconds by the database clock
    """
    CREATE TABLE keeper_leases (
        role TEXT NOT NULL,
        chain_id INTEGER NOT NULL,
        holder TEXT NOT NULL,
        node TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        renewed_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (role, chain_id)
    )
    """,
    # 7: events keyed by block number first. A backfill then appends to the primary key
    # instead of inserting at a random place (the block hash), a rollback and a block's
    # events are its prefix, so ``events_block`` goes. ``jobs_status`` and ``tasks_status``
    # go too: a status filter is a prefix of ``*_status_page``, status with contract one
    # of ``*_contract_status_page``, and each index costs every projection write.
    """
    CREATE TABLE events_by_block (
        chain_id INTEGER NOT NULL,
        block_hash TEXT NOT NULL,
        log_index INTEGER NOT NULL,
        block_number INTEGER NOT NULL,
        block_timestamp INTEGER NOT NULL,
        tx_hash TEXT NOT NULL,
        tx_index INTEGER NOT NULL,
        contract TEXT NOT NULL,
        protocol TEXT NOT NULL,
        name TEXT,
        variant TEXT NOT NULL,
        subject TEXT,
        args_json TEXT NOT NULL,
        topics_json TEXT NOT NULL,
        data_hex TEXT NOT NULL,
        PRIMARY KEY (chain_id, block_number, block_hash, log_index)
    );
    INSERT INTO events_by_block (chain_id, block_hash, log_index, block_number,
        block_timestamp, tx_hash, tx_index, contract, protocol, name, variant, subject,
        args_json, topics_json, data_hex)
    SELECT chain_id, block_hash, log_index, block_number, block_timestamp, tx_hash,
        tx_index, contract, protocol, name, variant, subject, args_json, topics_json,
        data_hex
    FROM events ORDER BY chain_id, block_number, block_hash, log_index;
    DROP TABLE events;
    ALTER TABLE events_by_block RENAME TO events;
    CREATE INDEX events_subject ON events (chain_id, contract, subject, block_number, log_index);
    CREATE INDEX events_kind_time ON events (chain_id, name, block_timestamp, contract, subject);
    DROP INDEX jobs_status;
    DROP INDEX tasks_status
    """,
    # 8: each subject's version, raised by the index store in the transaction that
    # rewrites its projection, events or reads: the API keeps a detail's part written
    # by the index store under it (keeper.api.detailcache), on a standby too
    """
    CREATE TABLE subject_versions (
        chain_id INTEGER NOT NULL,
        contract TEXT NOT NULL,
        subject TEXT NOT NULL,
        version INTEGER NOT NULL,
        PRIMARY KEY (chain_id, contract, subject)
    ) WITHOUT ROWID;
    INSERT INTO subject_versions (chain_id, contract, subject, version)
        SELECT chain_id, contract, job_id, 1 FROM jobs
        UNION ALL SELECT chain_id, contract, task_id, 1 FROM tasks
    """,
    # 9: versions rise in commit order (keeper.store.versions): the API learns what changed
    # since the versions it has seen through this index, and a raise finds the top in it
    """
    CREATE INDEX subject_versions_order ON subject_versions (chain_id, version)
    """,
    # 10: each rollback's fork point, numbered per chain in the rollback's own transaction:
    # the verifier (on every daemon sharing the database) learns from it which verdicts
    # may have left the chain, instead of rescanning every verification and event
    # (keeper.verify.scan). The newest ROLLBACKS_KEPT rows per chain are kept.
    """
    CREATE TABLE rollbacks (
        chain_id INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        fork_point INTEGER NOT NULL,
        rolled_back_at REAL NOT NULL,
        PRIMARY KEY (chain_id, seq)
    )
    """,
    # 11: a check of event times owed (keeper.sync.log_stamps): the lowest block committed
    # with its time from the node's log timestamps and not checked against its header
    # since, and whether those timestamps were found wrong. Kept here, not in a process,
    # so the check is made by whichever process comes next after a restart or a crash,
    # over what earlier processes committed too; the row goes once the check is made.
    """
    CREATE TABLE log_stamp_checks (
        chain_id INTEGER PRIMARY KEY,
        unchecked_from INTEGER NOT NULL,
        found_wrong INTEGER NOT NULL
    )
    """,
    # 12: a job's description is kept as the JSON string it is (index_rows.description_json):
    # anyone may put U+0000 in a description, PostgreSQL's text refuses that character, and
    # a raw write of one failed its batch on every retry, stopping the index there. JSON
    # escapes it, on both backends alike; the API serves the column as the JSON it holds.
    ByDialect(
        sqlite="UPDATE jobs SET description = json_quote(description) "
        "WHERE description IS NOT NULL",
        postgresql="UPDATE jobs SET description = to_json(description)::text "
        "WHERE description IS NOT NULL",
    ),
]
