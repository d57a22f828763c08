//! Server-side rendering of the fleet view. [`page`] is the whole
//! document; [`main`] the part the script swaps in when a server-sent
//! event brings a fresh rendering, so the first paint and every update
//! come from the same code.

use std::fmt::Write;

use super::view::{FleetView, GpuView, JobView, RackView};

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = include_str!("fleet.css");
const SCRIPT: &str = include_str!("fleet.js");

pub fn page(view: &FleetView) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>gpufleet sandbox</title><style>{STYLE}</style></head>\
         <body><header><h1>gpufleet sandbox</h1>\
         <span id=\"live\" data-live=\"connecting\">connecting…</span></header>\
         <main id=\"fleet\">{}</main><script>{SCRIPT}</script></body></html>\n",
        main(view)
    )
}

pub fn main(view: &FleetView) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<section class=\"counts\">\
         <div><b id=\"count-racks\">{}</b> racks</div>\
         <div><b id=\"count-nodes\">{}</b> Nodes</div>\
         <div><b id=\"count-gpus\">{}</b> GPUs</div>\
         <div><b id=\"count-lost\">{}</b> lost</div>\
         <div><b id=\"count-tfjobs\">{}</b> TFJobs</div></section>",
        view.racks.len(),
        view.nodes,
        view.gpus,
        view.racks
            .iter()
            .flat_map(|r| &r.slots)
            .flat_map(|s| &s.gpus)
            .filter(|g| g.state == "lost")
            .count(),
        view.tfjobs.len(),
    );
    html.push_str("<section class=\"jobs\"><h2>TFJobs</h2>");
    if !view.tfjobs_watched {
        html.push_str("<p class=\"none\">not watched here (this view is served by the Mokka control plane, which reads no pods or TFJobs)</p>");
    } else if view.tfjobs.is_empty() {
        html.push_str("<p class=\"none\">no TFJobs</p>");
    }
    for job in &view.tfjobs {
        job_html(&mut html, job);
    }
    html.push_str("</section><section class=\"racks\">");
    for rack in &view.racks {
        rack_html(&mut html, rack);
    }
    html.push_str("</section>");
    html
}

fn job_html(html: &mut String, job: &JobView) {
    let _ = write!(
        html,
        "<div class=\"job\" id=\"job-{ns}-{name}\" data-phase=\"{phase}\"><b>{ns}/{name}</b> \
         <span class=\"phase {phase_class}\">{phase}</span><ul>",
        ns = escape(&job.namespace),
        name = escape(&job.name),
        phase = escape(&job.phase),
        phase_class = escape(&job.phase.to_ascii_lowercase()),
    );
    for (pod, (node, phase)) in &job.pods {
        let _ = write!(
            html,
            "<li>{} → <code>{}</code> <small>{}</small></li>",
            escape(pod),
            escape(node),
            escape(phase)
        );
    }
    html.push_str("</ul></div>");
}

fn rack_html(html: &mut String, rack: &RackView) {
    let _ = write!(
        html,
        "<div class=\"rack\" id=\"rack-{name}\"><h2>{group} rack {index} \
         <small>{name} · chassis {chassis}</small></h2><table>\
         <tr><th>slot</th><th>Node</th><th>GPU 0</th><th>GPU 1</th><th>GPU 2</th><th>GPU 3</th>\
         <th>inventoried (gpuid)</th></tr>",
        name = escape(&rack.name),
        group = escape(&rack.group),
        index = rack.index,
        chassis = escape(&rack.chassis_serial),
    );
    for slot in &rack.slots {
        let node = slot.node.as_deref().unwrap_or("—");
        let _ = write!(
            html,
            "<tr class=\"slot\"><td>{}</td><td class=\"node\">{}</td>",
            slot.index,
            escape(node)
        );
        for gpu in &slot.gpus {
            gpu_html(html, gpu);
        }
        let when = slot.inventoried_at.as_deref().unwrap_or("—");
        let _ = write!(
            html,
            "<td class=\"when\" title=\"{}\">{}</td></tr>",
            escape(when),
            escape(&short_time(when))
        );
    }
    html.push_str("</table></div>");
}

/// `2026-12-01T17:50:24.530231251Z` → `17:50:24Z`: the table has no room
/// for the date; the full time is the cell's tooltip.
fn short_time(rfc3339: &str) -> String {
    match rfc3339.split_once('T') {
        Some((_, time)) => {
            let seconds = time.split(['.', 'Z', '+']).next().unwrap_or(time);
            format!("{seconds}Z")
        }
        None => rfc3339.to_string(),
    }
}

fn gpu_html(html: &mut String, gpu: &GpuView) {
    let temperature = gpu
        .celsius
        .map_or_else(|| "—".to_string(), |c| format!("{c} °C"));
    let serial_tail = &gpu.serial[gpu.serial.len().saturating_sub(6)..];
    let _ = write!(
        html,
        "<td class=\"gpu {state}\" id=\"gpu-{uuid}\" data-state=\"{state}\" \
         title=\"{uuid} serial {serial}\"><span class=\"state\">{state}</span> \
         <span class=\"temp\">{temperature}</span><br><small>…{tail}</small></td>",
        state = gpu.state,
        uuid = escape(&gpu.uuid),
        serial = escape(&gpu.serial),
        tail = escape(serial_tail),
    );
}

#[cfg(test)]
mod tests {
    use super::super::view::SlotView;
    use super::*;

    #[test]
    fn every_gpu_cell_carries_its_uuid_state_and_serial() {
        let view = FleetView {
            racks: vec![RackView {
                name: "r0".into(),
                group: "nvl72".into(),
                index: 0,
                chassis_serial: "0000000000042".into(),
                slots: vec![SlotView {
                    index: 0,
                    node: Some("gpu-node-000".into()),
                    inventoried_at: Some("2026-12-01T17:00:00Z".into()),
                    gpus: vec![GpuView {
                        index: 0,
                        uuid: "GPU-1".into(),
                        serial: "00000000001234567890".into(),
                        state: "lost",
                        celsius: None,
                    }],
                }],
            }],
            nodes: 1,
            gpus: 1,
            tfjobs_watched: true,
            tfjobs: vec![],
        };
        let html = page(&view);
        assert!(html.contains("id=\"gpu-GPU-1\" data-state=\"lost\""));
        assert!(html.contains("serial 00000000001234567890"));
        assert!(html.contains("<b id=\"count-racks\">1</b>"));
        assert!(html.contains("<b id=\"count-lost\">1</b>"));
        assert!(html.contains("title=\"2026-12-01T17:00:00Z\">17:00:00Z</td>"));
        assert_eq!(short_time("2026-12-01T17:50:24.530231251Z"), "17:50:24Z");
    }
}
