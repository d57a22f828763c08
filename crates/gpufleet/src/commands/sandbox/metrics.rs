//! The sandbox's `/metrics`: the three controllers' OpenMetrics pages as
//! one, each sample labelled `component="mokka|gpuid|tfjob"` (not
//! `controller`: Mokka's reconcile metrics already carry that label). Families
//! that two controllers both export (controller-kit's work-queue and
//! leader-election metrics) appear once with the samples of both, as one
//! scrape of several replicas would show them in Prometheus.

use std::collections::BTreeMap;

use super::controllers::Registries;

/// One metric family: its `# HELP`/`# TYPE`/`# UNIT` lines and samples.
#[derive(Default)]
struct Family {
    header: Vec<String>,
    samples: Vec<String>,
}

/// `name{a="b"} 1` → `name{component="c",a="b"} 1`. Pure.
fn with_controller_label(sample: &str, controller: &str) -> String {
    let label = format!("component=\"{controller}\"");
    match sample.find(['{', ' ']) {
        Some(at) if sample[at..].starts_with("{}") => {
            format!("{}{{{label}}}{}", &sample[..at], &sample[at + 2..])
        }
        Some(at) if sample[at..].starts_with('{') => {
            format!("{}{{{label},{}", &sample[..at], &sample[at + 1..])
        }
        Some(at) => format!("{}{{{label}}}{}", &sample[..at], &sample[at..]),
        None => sample.to_string(),
    }
}

/// Merges OpenMetrics pages `(controller, text)` into one. Pure.
pub fn aggregate(pages: &[(&str, String)]) -> String {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for (controller, text) in pages {
        let mut current: Option<String> = None;
        for line in text.lines() {
            if line == "# EOF" || line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# ") {
                let mut words = rest.splitn(3, ' ');
                let kind = words.next().unwrap_or_default();
                let name = words.next().unwrap_or_default();
                let family = families.entry(name.to_string()).or_default();
                // The first controller's HELP, TYPE and UNIT stand for all.
                let prefix = format!("# {kind} {name} ");
                if !family.header.iter().any(|h| h.starts_with(&prefix)) {
                    family.header.push(line.to_string());
                }
                current = Some(name.to_string());
                continue;
            }
            let name = current.clone().unwrap_or_else(|| {
                line.split(['{', ' '])
                    .next()
                    .unwrap_or_default()
                    .to_string()
            });
            families
                .entry(name)
                .or_default()
                .samples
                .push(with_controller_label(line, controller));
        }
    }
    let mut out = String::new();
    for family in families.values() {
        for line in family.header.iter().chain(&family.samples) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str("# EOF\n");
    out
}

/// The aggregated page of the three registries.
pub fn encode(registries: &Registries) -> Result<String, std::fmt::Error> {
    Ok(aggregate(&[
        ("mokka", registries.mokka.encode()?),
        ("gpuid", registries.gpuid.encode()?),
        ("tfjob", registries.tfjob.encode()?),
    ]))
}

/// The three controllers' page as the fleet view's `/metrics` source.
pub fn source(registries: Registries) -> crate::fleet_view::server::MetricsSource {
    std::sync::Arc::new(move || encode(&registries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_get_the_component_label_and_shared_families_appear_once() {
        let mokka = "# HELP workqueue_depth Depth.\n# TYPE workqueue_depth gauge\nworkqueue_depth{name=\"racks\"} 2\n# HELP mokka_bound Bound.\n# TYPE mokka_bound gauge\nmokka_bound 72\n# EOF\n";
        let tfjob = "# HELP workqueue_depth Depth.\n# TYPE workqueue_depth gauge\nworkqueue_depth{name=\"tfjob\"} 0\n# EOF\n";
        let page = aggregate(&[("mokka", mokka.into()), ("tfjob", tfjob.into())]);
        assert_eq!(
            page,
            "# HELP mokka_bound Bound.\n# TYPE mokka_bound gauge\nmokka_bound{component=\"mokka\"} 72\n\
             # HELP workqueue_depth Depth.\n# TYPE workqueue_depth gauge\n\
             workqueue_depth{component=\"mokka\",name=\"racks\"} 2\n\
             workqueue_depth{component=\"tfjob\",name=\"tfjob\"} 0\n# EOF\n"
        );
    }

    #[test]
    fn a_sample_with_empty_braces_or_none_is_labelled() {
        assert_eq!(
            with_controller_label("up{} 1", "x"),
            "up{component=\"x\"} 1"
        );
        assert_eq!(with_controller_label("up 1", "x"), "up{component=\"x\"} 1");
    }
}
