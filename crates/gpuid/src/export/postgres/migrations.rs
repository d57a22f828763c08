//! Versioned schema, embedded as SQL. `{inventory}`, `{events}`, `{view}`
//! and `{prefix}` are replaced by quoted identifiers (never by values).
//!
//! Applied in order inside one transaction under an advisory lock, each
//! recorded in `schema_migrations` (scope = the `POSTGRES_TABLE` name), so
//! replicas starting together and repeated starts are safe. Never edit a
//! released migration; add a new one.

/// `(version, name, sql)`.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "inventory and events tables",
        r#"
CREATE TABLE IF NOT EXISTS {inventory} (
    id              bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    cluster         text        NOT NULL,
    gpu_key         text        NOT NULL,
    gpu_uuid        text,
    serial          text,
    chassis_serial  text,
    node_name       text        NOT NULL,
    node_uid        text        NOT NULL,
    machine_id      text        NOT NULL,
    source_pod      text        NOT NULL,
    product_name    text,
    pci_bus_id      text,
    module_id       integer,
    record          jsonb       NOT NULL,
    first_seen      timestamptz NOT NULL,
    last_seen       timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, gpu_key)
);
CREATE INDEX IF NOT EXISTS {inventory_node_index} ON {inventory} (cluster, node_name);
CREATE INDEX IF NOT EXISTS {inventory_last_seen_index} ON {inventory} (last_seen);
CREATE TABLE IF NOT EXISTS {events} (
    event_id        uuid        PRIMARY KEY,
    kind            text        NOT NULL,
    cluster         text        NOT NULL,
    gpu_key         text        NOT NULL,
    observed_at     timestamptz NOT NULL,
    changed_fields  text[]      NOT NULL,
    event           jsonb       NOT NULL,
    inserted_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS {events_gpu_index} ON {events} (cluster, gpu_key, observed_at);
"#,
    ),
    (
        2,
        "upstream-compatible view",
        // Upstream gpuid's table columns over the current state, so
        // existing queries keep working: one row per GPU instead of one per
        // export, `gpu` is the board serial (the GPU key when the board has
        // none), an absent chassis reads `unknown` as upstream's README
        // promised.
        r#"
CREATE OR REPLACE VIEW {view} AS
SELECT id,
       cluster,
       node_name                         AS node,
       machine_id                        AS machine,
       source_pod                        AS source,
       COALESCE(chassis_serial, 'unknown') AS chassis,
       COALESCE(serial, gpu_key)         AS gpu,
       last_seen                         AS read_time,
       first_seen                        AS created_at
FROM {inventory};
"#,
    ),
];
