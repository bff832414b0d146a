// The status page of the Runtime Kit node agent: draws GET /api/v1/node (documented in
// runtimekit/statuspage/node_json.py) and fetches it again every REFRESH_MS. Every text is set as a
// text node, never parsed as HTML: names, evidence and pod names come from the node, not from us.
// How old the data is comes from the agent's own clock (the document's age_seconds and stale), so a
// browser whose clock is off still reads the right ages; a fetch that hangs counts as a failed one.
"use strict";

const REFRESH_MS = 1500;
const FETCH_TIMEOUT_MS = 5000;
const NODE_URL = "/api/v1/node";
const GiB = 1024 ** 3;
const PROCESSES_SHOWN = 4;

// -- DOM helpers ----------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (name === "class") node.className = value;
    else if (name === "style") Object.assign(node.style, value); // CSSOM: the CSP allows no style attribute
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function setText(id, text) {
  document.getElementById(id).textContent = text;
}

// -- formatting -------------------------------------------------------------------------------------

const known = (x) => x !== null && x !== undefined;
const percent = (ratio) => (known(ratio) ? `${Math.round(ratio * 100)} %` : "n/a");
const gib = (bytes) => (known(bytes) ? (bytes / GiB).toFixed(bytes >= 10 * GiB ? 1 : 2) : "n/a");
const width = (ratio) => `${(Math.max(0, Math.min(1, ratio || 0)) * 100).toFixed(1)}%`;

function bytes(value) {
  if (!known(value)) return "n/a";
  if (value >= GiB) return `${gib(value)} GiB`;
  return `${Math.round(value / 1024 ** 2)} MiB`;
}

// An age for people: "0.4 s", "42 s", "12 min", "3 h", "2 d".
function age(seconds) {
  if (seconds < 10) return `${seconds.toFixed(1)} s`;
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return seconds < 172800 ? `${Math.round(seconds / 3600)} h` : `${Math.round(seconds / 86400)} d`;
}

function healthOf(gpu) {
  if (gpu.health) return gpu.health.state;
  return gpu.lost ? "lost" : "unknown";
}

// -- pieces of a card -----------------------------------------------------------------------------

function meter(label, ratio, text, kind) {
  const fill = el("div", { class: "fill", style: { width: width(ratio) } });
  return el("div", { class: "meter", "data-meter": kind },
    el("span", { class: "label" }, label),
    el("div", { class: `bar ${kind}` }, fill),
    el("span", { class: "value" }, text));
}

// A quota bar: the slice's share of the card (grey) and what it uses of the card (teal; red when over).
function quotaMeter(label, quota, use, text) {
  const over = known(use) && use > quota + 1e-9;
  return el("div", { class: "meter", "data-meter": label },
    el("span", { class: "label" }, label),
    el("div", { class: "bar quota" },
      el("div", { class: "fill", style: { width: width(quota) } }),
      el("div", { class: over ? "use over" : "use", style: { width: width(use) } })),
    el("span", { class: "value" }, text));
}

function faultList(gpu) {
  const faults = gpu.health ? [...gpu.health.faults, ...gpu.health.instance_faults] : [];
  if (!faults.length) return null;
  return el("ul", { class: "faults" }, faults.map((f) => el("li", {},
    el("span", { class: "fault", "data-severity": f.severity }, f.fault),
    ` ${f.severity}${f.clearing ? " (clearing)" : ""} — ${f.evidence}`)));
}

function sliceBlock(slice, gpu) {
  const total = gpu.memory_total_bytes || 1;
  const compute = slice.compute_percent ? slice.compute_percent / 100 : 1;
  const used = known(slice.used_memory_bytes) ? ` ${bytes(slice.used_memory_bytes)} of` : "";
  return el("div", { class: "slice", "data-slice-id": slice.id },
    el("div", { class: "slice-head" },
      el("span", { class: "id" }, slice.id),
      el("span", { class: "muted" }, [slice.mode, slice.profile, slice.state, slice.owner].filter(Boolean).join(" · "))),
    quotaMeter("compute", compute, slice.utilization,
      `${known(slice.utilization) ? percent(slice.utilization) + " of " : ""}${slice.compute_percent ? slice.compute_percent + " %" : "any"}`),
    quotaMeter("memory", slice.memory_bytes / total,
      known(slice.used_memory_bytes) ? slice.used_memory_bytes / total : null, `${used} ${bytes(slice.memory_bytes)}`.trim()));
}

function processTable(gpu) {
  if (!gpu.processes.length) return null;
  const rows = gpu.processes.slice(0, PROCESSES_SHOWN).map((p) => el("tr", {},
    el("td", { class: "mono" }, p.pid),
    el("td", {}, p.name || "?"),
    el("td", { class: "num" }, bytes(p.used_memory_bytes)),
    el("td", { class: "muted", title: p.container || "host" }, p.container || "host")));
  const more = gpu.processes_total - rows.length;
  return el("div", { class: "sub" },
    el("h3", {}, `Processes (${gpu.processes_total})`),
    el("table", { class: "processes" }, el("tbody", {}, rows)),
    more > 0 ? el("div", { class: "muted" }, `+ ${more} more`) : null);
}

function gpuCard(gpu, slices) {
  const health = healthOf(gpu);
  const used = gpu.memory_used_bytes;
  const total = gpu.memory_total_bytes;
  const mine = slices.filter((s) => s.gpu === gpu.index);
  const mode = gpu.slicer ? gpu.slicer.mode : gpu.mig_enabled ? "mig" : null;
  const stats = [
    known(gpu.temperature_celsius) ? `${Math.round(gpu.temperature_celsius)} °C` : null,
    known(gpu.power_watts) ? `${Math.round(gpu.power_watts)}${known(gpu.power_limit_watts) ? " / " + Math.round(gpu.power_limit_watts) : ""} W` : null,
    gpu.pci,
  ].filter(Boolean);
  return el("article", { class: gpu.lost ? "gpu-card lost" : "gpu-card", "data-gpu": gpu.index, "data-health": health },
    el("div", { class: "card-head" },
      el("span", { class: "title" }, `GPU ${gpu.index}`),
      el("span", { class: "model", title: gpu.uuid || "" }, gpu.name || "unknown model")),
    el("div", { class: "card-tags" },
      el("span", { class: "pill health", "data-health": health }, health),
      gpu.lost ? el("span", { class: "pill tag", "data-health": "lost" }, "fallen off the bus") : null,
      mode ? el("span", { class: "pill tag" }, mode) : null,
      gpu.health && !gpu.health.schedulable ? el("span", { class: "pill tag" }, "not schedulable") : null,
      gpu.health && gpu.health.action !== "none" ? el("span", { class: "pill tag" }, gpu.health.action.replaceAll("_", " ")) : null),
    meter("util", gpu.utilization, percent(gpu.utilization), "util"),
    meter("memory", known(used) && total ? used / total : 0, `${gib(used)} / ${gib(total)} GiB`, "mem"),
    el("div", { class: "stats" }, stats.map((s) => el("span", {}, s))),
    faultList(gpu),
    mine.length ? el("div", { class: "sub" }, el("h3", {}, `Slices (${mine.length})`), mine.map((s) => sliceBlock(s, gpu))) : null,
    processTable(gpu),
    gpu.pods.length ? el("div", { class: "sub" }, el("h3", {}, "Pods"),
      el("div", { class: "chips" }, gpu.pods.map((p) => el("span", { class: "chip", title: p.via.join(", ") }, `${p.namespace}/${p.pod}`)))) : null);
}

// -- sections -------------------------------------------------------------------------------------

function counter(n, what, alert) {
  return el("div", { class: "counter", "data-alert": alert ? "yes" : "no" }, el("div", { class: "n" }, n), el("div", { class: "what" }, what));
}

function drawCounters(doc) {
  const states = doc.gpus.map(healthOf);
  const bad = states.filter((s) => s === "unhealthy" || s === "lost").length;
  const processes = doc.gpus.reduce((sum, g) => sum + g.processes_total, 0);
  const busy = doc.gpus.filter((g) => known(g.utilization));
  const util = busy.length ? busy.reduce((sum, g) => sum + g.utilization, 0) / busy.length : null;
  const sample = doc.sample || {};
  document.getElementById("counters").replaceChildren(
    counter(doc.gpus.length, "GPUs"),
    counter(states.filter((s) => s === "healthy").length, "healthy"),
    counter(bad, "unhealthy", bad > 0),
    counter(percent(util), "mean utilization"),
    counter(doc.slices.length, "slices"),
    counter(processes, "GPU processes"),
    counter(sample.driver_version || "n/a", `driver${sample.cuda_version ? " · CUDA " + sample.cuda_version : ""}`));
}

function drawSlices(doc) {
  const target = document.getElementById("slices");
  if (!doc.slices.length) {
    target.replaceChildren(el("p", { class: "muted" }, "No slices."));
    return;
  }
  const head = ["ID", "GPU", "Mode", "State", "Health", "Compute use / quota", "Memory use / quota", "Owner"];
  const rows = doc.slices.map((s) => el("tr", { "data-slice-id": s.id },
    el("td", { class: "mono" }, s.id), el("td", { class: "num" }, s.gpu),
    el("td", {}, s.profile ? `${s.mode} ${s.profile}` : s.mode), el("td", {}, s.state),
    el("td", {}, el("span", { class: "pill", "data-health": s.health || "unknown" }, s.health || "n/a")),
    el("td", { class: "num" }, `${percent(s.utilization)} / ${s.compute_percent ? s.compute_percent + " %" : "any"}`),
    el("td", { class: "num" }, `${bytes(s.used_memory_bytes)} / ${bytes(s.memory_bytes)}`),
    el("td", {}, s.owner)));
  target.replaceChildren(el("div", { class: "scroll" }, el("table", { class: "grid slices" },
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))), el("tbody", {}, rows))));
}

function drawTopology(doc) {
  const topology = doc.topology;
  const target = document.getElementById("topology");
  if (!topology) {
    target.replaceChildren(el("p", { class: "muted" }, "Not discovered yet."));
    return;
  }
  const rows = topology.rows.map((row) => el("tr", {},
    el("th", {}, `GPU${row.gpu}`),
    row.cells.map((c) => el("td", { "data-level": c.level }, c.label)),
    el("td", { class: "muted" }, known(row.numa_node) ? row.numa_node : "n/a")));
  const nics = topology.nics.map((name, i) => `NIC${i} ${name}`).join(", ");
  const parts = [
    el("div", { class: "scroll" }, el("table", { class: "grid matrix" },
      el("thead", {}, el("tr", {}, el("th", {}, ""), topology.columns.map((c) => el("th", {}, c)), el("th", {}, "NUMA"))),
      el("tbody", {}, rows))),
    el("p", { class: "legend" }, "NV# = NVLinks between the pair · PIX = same PCIe switch · NODE = same NUMA node · "
      + "SOCK = same CPU socket · SYS = across sockets" + (nics ? ` · ${nics}` : "")),
  ];
  if (topology.errors.length) parts.push(el("p", { class: "legend" }, `Not read: ${topology.errors.join("; ")}`));
  target.replaceChildren(...parts);
}

function drawComponents(doc) {
  document.getElementById("components").replaceChildren(...doc.agent.components.map((c) =>
    el("span", { class: "pill", "data-up": c.up ? "yes" : "no", title: c.last_error || `restarts: ${c.restarts}` }, c.name)));
}

function draw(doc) {
  const health = doc.health ? doc.health.state : "unknown";
  const nodeHealth = document.getElementById("node-health");
  nodeHealth.dataset.health = health;
  nodeHealth.textContent = `node ${health}`;
  const ready = document.getElementById("node-ready");
  ready.dataset.ready = doc.agent.ready ? "yes" : "no";
  ready.textContent = doc.agent.ready ? "ready" : `not ready: ${doc.agent.ready_detail}`;
  setText("node-name", doc.agent.node);
  const sample = doc.sample;
  setText("node-summary", !sample ? "waiting for the first sample"
    : sample.nvml_up ? `${sample.device_count} GPUs` : `NVML unavailable: ${sample.nvml_error}`);
  drawCounters(doc);
  document.getElementById("gpus").replaceChildren(...doc.gpus.map((g) => gpuCard(g, doc.slices)));
  drawSlices(doc);
  drawTopology(doc);
  drawComponents(doc);
}

// -- the refresh loop -----------------------------------------------------------------------------

function connection(state, text, title) {
  const node = document.getElementById("connection");
  node.dataset.state = state;
  node.textContent = text;
  node.title = title || "";
}

// The banner that says the data is stale, in words (a live region: set only when its text changes).
function staleBanner(text) {
  const banner = document.getElementById("stale");
  if (banner.textContent !== text) banner.textContent = text;
  banner.hidden = !text;
  document.body.dataset.stale = text ? "yes" : "no";
}

// "live · sample 0.4 s old · attribution 0.5 s old", or "stale · …" (and the banner) when a part is
// older than the agent's stale_after_seconds (a few sampling intervals).
function drawFreshness(doc) {
  const { sample, attribution, agent } = doc;
  const aged = (what, part) => (part && known(part.age_seconds) ? `${what} ${age(part.age_seconds)} old` : null);
  const stale = Boolean((sample && sample.stale) || (attribution && attribution.stale));
  const every = known(agent.sample_interval_seconds) ? ` (the agent samples every ${agent.sample_interval_seconds} s)` : "";
  const text = [stale ? "stale" : "live", sample ? aged("sample", sample) : "waiting for the first sample",
    aged("attribution", attribution)].filter(Boolean).join(" · ");
  connection(stale ? "stale" : "live", text, `page updated ${new Date().toLocaleTimeString()}${every}`);
  // No age in the banner: it is a live region, read out again whenever its text changes.
  let banner = "";
  if (sample && sample.stale) {
    banner = `Stale data: no new GPU sample for several sampling intervals${every}. The numbers shown are `
      + "the last ones read; the sampler may be stuck in the driver.";
  } else if (attribution && attribution.stale) {
    banner = "Stale attribution: processes and pods not attributed again for several sampling intervals; "
      + "they may have changed.";
  }
  staleBanner(banner);
}

async function refresh() {
  try {
    const response = await fetch(NODE_URL, { cache: "no-store", signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const doc = await response.json();
    draw(doc);
    drawFreshness(doc);
  } catch (error) {
    connection("down", `agent unreachable (${error.message}); retrying`);
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

refresh();
