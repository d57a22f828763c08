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
