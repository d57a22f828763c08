//! The page's shell: markup, style and script with no fleet data in it.
//! The script fetches the model from `/api/fleet`, then applies the deltas
//! of `/events`, and draws only what is on screen; so the page is the same
//! few kilobytes for 36 Nodes or 100,000.

use super::model::Mode;

const STYLE: &str = include_str!("fleet.css");
const SCRIPT: &str = include_str!("fleet.js");
const BODY: &str = include_str!("fleet.html");

/// A GPU chip in the fleet view's green, as an SVG icon.
pub const FAVICON: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\">\
<rect x=\"2\" y=\"2\" width=\"12\" height=\"12\" rx=\"2\" fill=\"#1e6e3c\"/>\
<rect x=\"5\" y=\"5\" width=\"6\" height=\"6\" fill=\"#fff\"/></svg>";

pub fn mode_word(mode: Mode) -> &'static str {
    match mode {
        Mode::Sandbox => "sandbox",
        Mode::Cluster => "cluster",
    }
}

pub fn page(mode: Mode) -> String {
    let mode = mode_word(mode);
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>gpufleet {mode}</title>\
         <link rel=\"icon\" href=\"/favicon.svg\" type=\"image/svg+xml\">\
         <style>{STYLE}</style></head>\
         <body data-mode=\"{mode}\">{body}<script>{SCRIPT}</script></body></html>\n",
        body = BODY.replace("{mode}", mode),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_its_mode_and_carries_no_fleet_data() {
        let sandbox = page(Mode::Sandbox);
        assert!(sandbox.contains("<title>gpufleet sandbox</title>"));
        assert!(sandbox.contains("name=\"viewport\""));
        assert!(sandbox.contains("aria-live"));
        assert!(page(Mode::Cluster).contains("data-mode=\"cluster\""));
        assert!(!sandbox.contains("{mode}"));
        // Small whatever the fleet's size: the data comes from /api/fleet.
        assert!(sandbox.len() < 64 * 1024, "{} bytes", sandbox.len());
    }
}
