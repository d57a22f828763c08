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
