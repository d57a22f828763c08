//! The README's knob table stays in step with `KNOBS`.

use gpuid::collect::COLLECTOR_KNOBS;
use gpuid::config::KNOBS;

#[test]
fn the_readme_lists_every_knob_with_its_flag_and_default() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for knob in KNOBS.iter().chain(COLLECTOR_KNOBS) {
        let default = knob.default.map_or("—".to_owned(), |d| format!("`{d}`"));
        let row_start = format!("| `{}` | `--{}` | {default} |", knob.env, knob.flag);
        assert!(
            readme.contains(&row_start),
            "README is missing the row starting {row_start}"
        );
    }
}

/// The table-name limit is stated in the README with the number the
/// configuration enforces (it used to say 63 while 40 already failed).
#[test]
fn the_readme_states_the_postgres_table_limit_the_configuration_enforces() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let limit = gpuid::config::MAX_POSTGRES_TABLE_NAME;
    let statement = format!("The name may have at most {limit}\n  characters");
    assert!(
        readme.contains(&statement),
        "README does not say {statement:?}"
    );
    let knob = KNOBS
        .iter()
        .find(|knob| knob.env == "POSTGRES_TABLE")
        .unwrap();
    assert!(
        knob.help.contains(&format!("at most {limit} characters")),
        "{}",
        knob.help
    );
}

/// The fenced block right after `<!-- example: NAME -->` in the README.
fn example(readme: &str, name: &str) -> String {
    let marker = format!("<!-- example: {name} -->");
    let after = readme
        .split_once(&marker)
        .unwrap_or_else(|| panic!("README has no {marker}"))
        .1;
    let fence = after.find("```").expect("a fenced block after the marker");
    let body = &after[fence + 3..];
    let body = &body[body.find('\n').expect("fence line") + 1..];
    body[..body.find("```").expect("closing fence")].to_owned()
}

fn keys(value: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .expect("an object")
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

/// The README's stdout examples are real lines: the same fields as the
/// exporter writes for the H100 capture, with the envelope values.
#[test]
fn the_readme_stdout_line_examples_have_the_fields_the_exporter_writes() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let (records, events) = crate::export_support::h100_batch();
    let text = gpuid::export::batch_lines(&crate::export_support::batch(records, events));
    let real: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let real_record = &real[0];
    let real_event = real.last().unwrap();
    let documented = example(&readme, "stdout-lines");
    let lines: Vec<serde_json::Value> = documented
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("README example line is not JSON ({error}): {line}"))
        })
        .collect();
    assert_eq!(lines.len(), 2, "one record line and one event line");
    assert_eq!(
        keys(&lines[0]),
        keys(real_record),
        "record line; a real one is:\n{}",
        text.lines().next().unwrap()
    );
    assert_eq!(
        keys(&lines[1]),
        keys(real_event),
        "event line; a real one is:\n{}",
        text.lines().last().unwrap()
    );
    assert_eq!(lines[0]["kind"], gpuid::export::RECORD_KIND);
    assert_eq!(lines[1]["kind"], "gpu_added");
    for line in &lines {
        assert_eq!(line["schemaVersion"], gpuid::export::LINE_SCHEMA_VERSION);
    }
}

/// Every column the migrations create is named in the README's
/// PostgreSQL section.
#[test]
fn the_readme_names_every_postgresql_column_and_object() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split_once("### PostgreSQL objects")
        .expect("a PostgreSQL objects section")
        .1;
    let section = section.split("\n## ").next().unwrap_or_default();
    for (_, _, sql) in gpuid::export::MIGRATIONS {
        for line in sql.lines() {
            let line = line.trim();
            let first = line.split_whitespace().next().unwrap_or_default();
            let is_column = !first.is_empty()
                && first.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                && line.contains(' ')
                && !["select", "from", "create"].contains(&first)
                && !line.starts_with("PRIMARY");
            if is_column {
                assert!(
                    section.contains(&format!("`{first}`")),
                    "the README's PostgreSQL section does not name the column `{first}`"
                );
            }
        }
    }
    for object in [
        "<table>_inventory",
        "<table>_events",
        "schema_migrations",
        "_inventory_node_idx",
        "_inventory_last_seen_idx",
        "_events_gpu_idx",
    ] {
        assert!(section.contains(object), "{object} is not documented");
    }
}

/// The README's S3 key example is what `object_key` builds.
#[test]
fn the_readme_s3_key_example_is_what_the_exporter_writes() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let documented = example(&readme, "s3-keys");
    let (records, events) = crate::export_support::h100_batch();
    let batch = crate::export_support::batch(records, events);
    for (part, format) in [
        ("records", gpuid::export::S3Format::Csv),
        ("events", gpuid::export::S3Format::Ndjson),
    ] {
        let key = gpuid::export::object_key(
            "serial-numbers",
            "year=%Y/month=%m/day=%d/hour=%H",
            "gpuid-7d9f8-abcde",
            &batch,
            part,
            format,
        );
        assert!(
            documented.lines().any(|line| line.trim() == key),
            "the README's s3-keys example lacks {key}"
        );
    }
}
