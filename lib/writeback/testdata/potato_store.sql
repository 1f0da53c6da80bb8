-- A project.sqlite as Potato's migration 0001_training_runs leaves it,
-- written from the constraints listed in FORMATS.md ("Potato's store"),
-- independently of the store code's own CREATE statements: the tests open
-- it to check that the write-back writes correctly into a store Potato
-- created first.
PRAGMA journal_mode = WAL;
PRAGMA foreign_keys = ON;

CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at);

CREATE TABLE training_runs (
    project       TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    trainer       TEXT NOT NULL,
    backend       TEXT NOT NULL DEFAULT 'local',
    schema_names  TEXT NOT NULL DEFAULT '[]',
    kinds         TEXT NOT NULL DEFAULT '[]',
    status        TEXT NOT NULL,
    trigger       TEXT NOT NULL DEFAULT 'manual',
    created_at    REAL NOT NULL,
    started_at    REAL,
    finished_at   REAL,
    n_train       INTEGER NOT NULL DEFAULT 0,
    n_val         INTEGER NOT NULL DEFAULT 0,
    n_test        INTEGER NOT NULL DEFAULT 0,
    split_seed    INTEGER NOT NULL DEFAULT 0,
    params        TEXT NOT NULL DEFAULT '{}',
    metrics       TEXT NOT NULL DEFAULT '{}',
    artifact_dir  TEXT NOT NULL DEFAULT '',
    model_version TEXT NOT NULL DEFAULT '',
    bundle_digest TEXT NOT NULL DEFAULT '',
    error         TEXT NOT NULL DEFAULT '',
    error_code    TEXT NOT NULL DEFAULT '',
    pid           INTEGER,
    host          TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (project, run_id)
);
CREATE INDEX potato_runs_by_created ON training_runs (project, created_at DESC);

CREATE TABLE training_run_items (
    project     TEXT NOT NULL,
    run_id      TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    split       TEXT NOT NULL,
    PRIMARY KEY (project, run_id, instance_id)
);
CREATE INDEX potato_items_by_split ON training_run_items (project, run_id, split);

CREATE TABLE training_predictions (
    project     TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    schema_name TEXT NOT NULL,
    run_id      TEXT NOT NULL,
    payload     TEXT NOT NULL,
    confidence  REAL,
    created_at  REAL NOT NULL,
    PRIMARY KEY (project, instance_id, schema_name)
);
CREATE INDEX potato_predictions_by_run ON training_predictions (project, run_id);

INSERT INTO schema_migrations (name, applied_at) VALUES ('0001_training_runs', 1755657300.0);
