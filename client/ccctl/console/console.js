// ccctl console: plain script, no framework, nothing fetched from elsewhere.
// Every figure comes from the console's JSON endpoints (docs/console.md);
// charts are SVG drawn here. Text from the cluster goes in as textContent,
// never as markup.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

const state = {
  token: sessionStorage.getItem("ccl_console_token") || "",
  role: "none",
  page: "world",
  banners: new Map(),
  lastGeneration: null,
  generations: [],
  members: new Map(),
  groups: ["world"],
  opsSeen: new Map(),
  trace: null,
  view: null,
  pair: null,
  bench: null,
  baseline: JSON.parse(localStorage.getItem("ccl_bench_baseline") || "null"),
  doctor: null,
  jobsLoaded: false,
};

// ---- Elements -------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    node.setAttribute(key, value);
  }
  if (text !== undefined) node.textContent = text;
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

// ---- Talking to the console ----------------------------------------------

class ApiError extends Error {
  constructor(message, code, where, status) {
    super(message);
    this.code = code || "";
    this.where = where || "";
    this.status = status;
  }
}

async function api(path, options = {}) {
  const headers = {};
  if (state.token) headers["Authorization"] = "Bearer " + state.token;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method: options.method || "GET",
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
    });
  } catch (error) {
    throw new ApiError("the console itself does not answer (was `ccctl console` stopped?)",
                       "UNAVAILABLE", "network", 0);
  }
  let document_ = null;
  try {
    document_ = await response.json();
  } catch (error) {
    document_ = null;
  }
  if (!response.ok) {
    const message = document_ && document_.error ? document_.error : `HTTP ${response.status}`;
    if (response.status === 401) showTokenForm();
    throw new ApiError(message, document_ && document_.code, document_ && document_.where,
                       response.status);
  }
  return document_;
}

function describe(error) {
  if (!(error instanceof ApiError)) return String(error);
  if (error.where === "cluster") {
    return `the cluster did not answer: ${error.code}: ${error.message}`;
  }
  return error.message;
}

function setBanner(source, message) {
  if (message) state.banners.set(source, message);
  else state.banners.delete(source);
  const banner = $("banner");
  clear(banner);
  for (const [key, text] of state.banners) {
    banner.append(el("div", { "data-source": key }, text));
  }
  banner.hidden = state.banners.size === 0;
}

function markLive(ok) {
  const live = $("live");
  live.textContent = ok ? "live " + new Date().toLocaleTimeString() : "no answer";
  live.className = ok ? "live ok" : "live bad";
}

// ---- Token and role --------------------------------------------------------

function showTokenForm() {
  $("token-form").hidden = false;
  $("token-input").focus();
}

async function loadSession() {
  try {
    const session = await api("/api/session");
    state.role = session.role;
    $("coordinator").textContent = "cluster " + session.coordinator;
    const role = $("role");
    role.textContent = session.role === "none" ? "no access" : session.role;
    role.className = "role " + session.role;
    role.title = session.operator_enabled
        ? "the operator token lets this page run benches and the doctor"
        : "read-only console: start it with --operator-token-file to run benches and the doctor";
    if (session.role === "none") showTokenForm();
  } catch (error) {
    setBanner("session", describe(error));
  }
}

// ---- World -----------------------------------------------------------------

const stripPrefix = (text, prefix) => (text || "").replace(prefix, "").toLowerCase();

function formatBytes(bytes) {
  const value = Number(bytes);
  if (!isFinite(value)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = value;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[i];
}

function deviceText(device) {
  if (!device) return "–";
  return device.kind === "DEVICE_KIND_CUDA" ? `cuda:${device.index}` : "cpu";
}

function renderWorld(world) {
  $("generation").textContent = world.generation;
  $("world-size").textContent = world.world_size;
  const worldState = stripPrefix(world.state, "WORLD_STATE_");
  $("world-state").textContent = worldState;
  $("world-state").className = "state-" + worldState;
  $("heartbeat").textContent = `every ${world.heartbeat_interval_ms} ms, lost after ${world.heartbeat_timeout_ms} ms`;
  $("reforming").hidden = !world.reforming_reason;
  $("reforming").textContent = world.reforming_reason ? "re-forming: " + world.reforming_reason : "";
  $("began-after").hidden = !world.began_after;
  $("began-after").textContent = world.began_after ? "this generation began after: " + world.began_after : "";

  if (world.generation !== state.lastGeneration) {
    state.lastGeneration = world.generation;
    state.generations.unshift({ generation: world.generation, at: new Date(),
                                why: world.began_after || "" });
    const list = $("generations");
    clear(list);
    for (const g of state.generations.slice(0, 20)) {
      list.append(el("li", { "data-generation": g.generation },
                     `generation ${g.generation}, first seen ${g.at.toLocaleTimeString()}`,
                     g.why ? ` (after ${g.why})` : ""));
    }
  }

  const workers = new Map();
  for (const worker of world.workers || []) workers.set(worker.rank, worker);
  const hosts = new Map();
  for (const member of world.members || []) {
    const host = member.host_id ? "id:" + member.host_id : (member.host || "?");
    if (!hosts.has(host)) hosts.set(host, []);
    hosts.get(host).push(member);
  }
  const box = $("hosts");
  clear(box);
  for (const [host, members] of [...hosts.entries()].sort()) {
    const table = el("table", { class: "grid world-table" },
      el("tr", {}, ...["rank", "address", "device", "state", "heartbeat", "backend",
                       "tensors", "bytes", "worker"].map((h) => el("th", {}, h))));
    for (const member of members.sort((a, b) => a.rank - b.rank)) {
      const memberState = stripPrefix(member.state, "MEMBER_STATE_");
      const worker = workers.get(member.rank) || {};
      const workerText = worker.error
          ? worker.error
          : `${worker.state || "?"} in generation ${worker.generation}` +
            (worker.version ? `, ${worker.version}` : "");
      // The coordinator marks a rank lost only after its heartbeat timeout;
      // a worker that does not answer the console is shown at once.
      const silent = Boolean(worker.error) && memberState === "ready";
      table.append(el("tr", { "data-rank": member.rank, "data-state": memberState,
                              "data-answering": worker.error ? "no" : "yes",
                              class: "member " + memberState + (silent ? " silent" : "") },
        el("td", {}, member.rank),
        el("td", {}, member.address),
        el("td", {}, deviceText(member.device)),
        el("td", { class: "state" }, silent ? "ready, not answering" : memberState),
        el("td", {}, `${member.last_seen_age_ms} ms ago`),
        el("td", {}, worker.backend || "–"),
        el("td", {}, worker.tensor_count !== undefined ? worker.tensor_count : member.tensor_count),
        el("td", {}, formatBytes(worker.tensor_bytes !== undefined ? worker.tensor_bytes : member.tensor_bytes)),
        el("td", { class: worker.error ? "error" : "" }, workerText)));
    }
    box.append(el("div", { class: "host" }, el("h3", {}, "host " + host), table));
  }

  const groups = new Set(["world"]);
  for (const worker of world.workers || []) {
    for (const group of worker.groups || []) groups.add(group.name);
  }
  state.groups = [...groups];
  const select = $("ops-group");
  const current = select.value || "world";
  if ([...select.options].map((o) => o.value).join() !== state.groups.join()) {
    clear(select);
    for (const name of state.groups) select.append(el("option", { value: name }, name));
    select.value = state.groups.includes(current) ? current : "world";
  }
  document.body.classList.remove("stale");
}

async function pollWorld() {
  try {
    const world = await api("/api/world");
    setBanner("world", null);
    markLive(true);
    renderWorld(world);
  } catch (error) {
    setBanner("world", describe(error));
    markLive(false);
    document.body.classList.add("stale");
  }
}

// ---- Ops -------------------------------------------------------------------

const DTYPE_BYTES = { FLOAT32: 4, FLOAT64: 8, FLOAT16: 2, BFLOAT16: 2, INT32: 4, INT64: 8,
                      INT8: 1, UINT8: 1, FLOAT8_E4M3: 1, FLOAT8_E5M2: 1, BOOL: 1 };

function recordBytes(record) {
  return Number(record.count) * (DTYPE_BYTES[stripPrefix(record.dtype, "DTYPE_").toUpperCase()] || 0);
}

function opText(record) {
  const kind = stripPrefix(record.kind, "OP_KIND_");
  let text = kind;
  if (kind === "send") text += ` to ${record.peer}`;
  if (kind === "recv") text += ` from ${record.peer}`;
  if (kind !== "nop" && kind !== "barrier") {
    text += ` ${record.count} ${stripPrefix(record.dtype, "DTYPE_")}`;
  }
  return text;
}

function noteRates(doc) {
  const now = Date.now();
  for (const log of doc.ranks) {
    for (const record of log.records) {
      const workState = stripPrefix(record.state, "WORK_STATE_");
      if (workState !== "completed") continue;
      const ended = Number(record.timing.enqueued_unix_us) / 1000 + (record.timing.total_us || 0) / 1000;
      if (!(ended > 0)) continue;
      state.opsSeen.set(`${doc.group}/${record.generation}/${record.seq}/${log.rank}`,
                        { op: `${doc.group}/${record.generation}/${record.seq}`, ended,
                          bytes: recordBytes(record) });
    }
  }
  for (const [key, seen] of state.opsSeen) {
    if (now - seen.ended > 5 * 60 * 1000) state.opsSeen.delete(key);
  }
  const buckets = 30;
  const width = 10000;  // ms
  const ops = Array.from({ length: buckets }, () => new Set());
  const bytes = new Array(buckets).fill(0);
  for (const seen of state.opsSeen.values()) {
    const i = buckets - 1 - Math.floor((now - seen.ended) / width);
    if (i < 0 || i >= buckets) continue;
    ops[i].add(seen.op);
    bytes[i] += seen.bytes;
  }
  const opsRate = ops.map((s) => s.size / (width / 1000));
  const bytesRate = bytes.map((b) => b / (width / 1000));
  const lastMinute = (values) => values.slice(-6).reduce((a, b) => a + b, 0) / 6;
  $("ops-rate").textContent = lastMinute(opsRate).toFixed(1);
  $("bytes-rate").textContent = formatBytes(lastMinute(bytesRate)) + "/s";
  sparkline($("ops-spark"), opsRate);
  sparkline($("bytes-spark"), bytesRate);
}

function sparkline(node, values) {
  clear(node);
  const max = Math.max(...values, 1e-9);
  const points = values.map((v, i) =>
    `${(i / (values.length - 1)) * 300},${38 - (v / max) * 36}`).join(" ");
  node.append(svg("polyline", { points, class: "spark-line" }));
}

function renderOps(doc) {
  const list = $("diagnosis");
  clear(list);
  for (const line of doc.diagnosis || []) list.append(el("li", {}, line));
  for (const error of doc.errors || []) {
    list.append(el("li", { class: "error" }, `rank ${error.rank}: ${error.error}`));
  }
  const logs = [...doc.ranks].sort((a, b) => a.rank - b.rank);
  const bySeq = new Map();
  for (const log of logs) {
    for (const record of log.records) {
      const key = `${record.generation}/${record.seq}`;
      if (!bySeq.has(key)) bySeq.set(key, { generation: Number(record.generation),
                                            seq: Number(record.seq), cells: new Map() });
      bySeq.get(key).cells.set(log.rank, record);
    }
  }
  const rows = [...bySeq.values()].sort((a, b) =>
    b.generation - a.generation || b.seq - a.seq);
  const table = $("ops-table");
  clear(table);
  table.append(el("tr", {}, el("th", {}, "generation"), el("th", {}, "seq"),
                  ...logs.map((log) => el("th", {}, "rank " + log.rank))));
  // The oldest seq each rank still keeps: below it a missing record says
  // nothing (the recorder dropped it), above it the rank never had the op.
  const oldest = new Map(logs.map((log) => [log.rank, log.records.length
      ? Math.min(...log.records.map((r) => Number(r.seq))) : Infinity]));
  for (const row of rows) {
    const states = [...row.cells.values()].map((r) => stripPrefix(r.state, "WORK_STATE_"));
    const anyDone = states.includes("completed");
    const tr = el("tr", { "data-seq": row.seq });
    tr.append(el("td", {}, row.generation), el("td", {}, row.seq));
    for (const log of logs) {
      const record = row.cells.get(log.rank);
      if (!record) {
        const diverge = row.seq >= oldest.get(log.rank) && anyDone;
        tr.append(el("td", { class: diverge ? "diverge missing" : "muted" },
                     diverge ? "never had it" : "–"));
        continue;
      }
      const workState = stripPrefix(record.state, "WORK_STATE_");
      const waiting = workState === "queued" || workState === "running";
      const diverge = workState === "failed" || (waiting && (anyDone || states.length < logs.length));
      const text = `${opText(record)} · ${workState}`;
      const cell = el("td", { class: (diverge ? "diverge " : "") + "ws-" + workState,
                              "data-rank": log.rank, "data-state": workState }, text);
      if (record.error_message) cell.title = record.error_message;
      tr.append(cell);
    }
    table.append(tr);
  }
  noteRates(doc);
}

async function pollOps() {
  const group = $("ops-group").value || "world";
  const limit = $("ops-limit").value || 20;
  try {
    const doc = await api(`/api/ops?group=${encodeURIComponent(group)}&limit=${encodeURIComponent(limit)}`);
    setBanner("ops", null);
    renderOps(doc);
  } catch (error) {
    setBanner("ops", "ops: " + describe(error));
  }
}

// ---- Timeline --------------------------------------------------------------

function slicesOf(trace) {
  const names = new Map();
  const slices = [];
  for (const event of trace.traceEvents || []) {
    if (event.ph === "M" && event.name === "process_name") names.set(`${event.pid}`, event.args.name);
    if (event.ph === "M" && event.name === "thread_name") names.set(`${event.pid}/${event.tid}`, event.args.name);
    if (event.ph === "X") slices.push(event);
  }
  const lanes = [...new Set(slices.map((s) => `${s.pid}/${s.tid}`))]
    .sort((a, b) => { const [ap, at] = a.split("/").map(Number); const [bp, bt] = b.split("/").map(Number);
                      return ap - bp || at - bt; });
  return { names, slices, lanes };
}

function inPair(slice) {
  if (!state.pair) return true;
  const [a, b] = state.pair;
  const peer = slice.args ? slice.args.peer : undefined;
  return (slice.pid === a && peer === b) || (slice.pid === b && peer === a);
}

function fitView() {
  if (!state.trace) return;
  const chosen = state.trace.slices.filter(inPair);
  const pool = chosen.length ? chosen : state.trace.slices;
  if (!pool.length) { state.view = { t0: 0, t1: 1 }; return; }
  const t0 = Math.min(...pool.map((s) => s.ts));
  const t1 = Math.max(...pool.map((s) => s.ts + s.dur));
  const pad = Math.max((t1 - t0) * 0.02, 1);
  state.view = { t0: t0 - pad, t1: t1 + pad };
}

const KIND_COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#76b7b2", "#edc948", "#b07aa1",
                     "#ff9da7", "#9c755f", "#bab0ac", "#e15759"];
function kindColor(name) {
  let hash = 0;
  for (const c of name.split(" ")[0]) hash = (hash * 31 + c.charCodeAt(0)) >>> 0;
  return KIND_COLORS[hash % (KIND_COLORS.length - 1)];
}

function renderTimeline() {
  const node = $("timeline");
  clear(node);
  const trace = state.trace;
  if (!trace) return;
  const label = 170;
  const width = Math.max($("timeline-box").clientWidth - 4, 400);
  const rowHeight = 22;
  const height = 24 + trace.lanes.length * rowHeight;
  node.setAttribute("width", width);
  node.setAttribute("height", height);
  node.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const { t0, t1 } = state.view;
  const x = (t) => label + ((t - t0) / (t1 - t0)) * (width - label - 4);
  // Time axis: ten ticks.
  for (let i = 0; i <= 10; i++) {
    const t = t0 + ((t1 - t0) * i) / 10;
    node.append(svg("line", { x1: x(t), x2: x(t), y1: 16, y2: height, class: "tick" }));
    node.append(svg("text", { x: x(t) + 2, y: 12, class: "axis" }, formatUs(t)));
  }
  trace.lanes.forEach((lane, i) => {
    const [pid] = lane.split("/");
    const y = 20 + i * rowHeight;
    const name = `${(trace.names.get(pid) || "rank " + pid).replace(/ \(.*\)$/, "")} · ${
      (trace.names.get(lane) || "").replace("group ", "")}`;
    node.append(svg("text", { x: 4, y: y + 15, class: "lane" }, name));
    node.append(svg("line", { x1: label, x2: width, y1: y + rowHeight - 1, y2: y + rowHeight - 1, class: "lane-line" }));
  });
  const laneIndex = new Map(trace.lanes.map((lane, i) => [lane, i]));
  let drawn = 0;
  for (const slice of trace.slices) {
    if (slice.ts + slice.dur < t0 || slice.ts > t1) continue;
    const y = 20 + laneIndex.get(`${slice.pid}/${slice.tid}`) * rowHeight;
    const x0 = Math.max(x(slice.ts), label);
    const x1 = Math.min(x(slice.ts + slice.dur), width);
    const failed = slice.name.includes("FAILED");
    const rect = svg("rect", {
      x: x0, y: y + 2, width: Math.max(x1 - x0, 1.5), height: rowHeight - 5,
      fill: failed ? "#d62728" : kindColor(slice.name),
      class: "slice" + (inPair(slice) ? (state.pair ? " picked" : "") : " dimmed"),
    });
    rect.append(svg("title", {}, `${slice.name} seq ${slice.args.seq}, ${formatUs(slice.dur)}`));
    rect.addEventListener("click", () => {
      $("timeline-detail").textContent = `rank ${slice.pid}: ${slice.name}\n` +
          JSON.stringify(slice.args, null, 2);
    });
    node.append(rect);
    if (x1 - x0 > 60) {
      node.append(svg("text", { x: x0 + 3, y: y + 15, class: "slice-label" }, slice.name));
    }
    drawn++;
  }
  node.dataset.slices = drawn;
}

function formatUs(us) {
  const a = Math.abs(us);
  if (a >= 1e6) return (us / 1e6).toFixed(2) + " s";
  if (a >= 1e3) return (us / 1e3).toFixed(2) + " ms";
  return us.toFixed(1) + " us";
}

async function loadTimeline() {
  const limit = $("timeline-limit").value || 200;
  $("timeline-filter").textContent = state.pair
      ? `ops between ranks ${state.pair[0]} and ${state.pair[1]} highlighted` : "";
  try {
    const trace = await api(`/api/trace?limit=${encodeURIComponent(limit)}`);
    setBanner("timeline", null);
    state.raw = trace;
    state.trace = slicesOf(trace);
    fitView();
    renderTimeline();
  } catch (error) {
    setBanner("timeline", "timeline: " + describe(error));
  }
}

function setupTimeline() {
  const node = $("timeline");
  node.addEventListener("wheel", (event) => {
    if (!state.view) return;
    event.preventDefault();
    const box = node.getBoundingClientRect();
    const label = 170;
    const fraction = Math.min(Math.max((event.clientX - box.left - label) / (box.width - label), 0), 1);
    const { t0, t1 } = state.view;
    const at = t0 + (t1 - t0) * fraction;
    const scale = event.deltaY > 0 ? 1.25 : 0.8;
    state.view = { t0: at - (at - t0) * scale, t1: at + (t1 - at) * scale };
    renderTimeline();
  }, { passive: false });
  let drag = null;
  node.addEventListener("mousedown", (event) => { drag = { x: event.clientX, view: state.view }; });
  window.addEventListener("mouseup", () => { drag = null; });
  window.addEventListener("mousemove", (event) => {
    if (!drag || !drag.view) return;
    const box = node.getBoundingClientRect();
    const dt = ((event.clientX - drag.x) / (box.width - 170)) * (drag.view.t1 - drag.view.t0);
    state.view = { t0: drag.view.t0 - dt, t1: drag.view.t1 - dt };
    renderTimeline();
  });
  $("timeline-refresh").addEventListener("click", loadTimeline);
  $("timeline-fit").addEventListener("click", () => { fitView(); renderTimeline(); });
  $("timeline-download").addEventListener("click", () => {
    if (!state.raw) return;
    const blob = new Blob([JSON.stringify(state.raw)], { type: "application/json" });
    const link = el("a", { href: URL.createObjectURL(blob), download: "ccctl-trace.json" });
    document.body.append(link);
    link.click();
    link.remove();
  });
}

// ---- Runs (bench, doctor) --------------------------------------------------

async function followJob(id, status, onDone) {
  for (;;) {
    let job;
    try {
      job = await api(`/api/jobs/${id}`);
    } catch (error) {
      status.textContent = describe(error);
      status.className = "error";
      return;
    }
    const last = job.progress.length ? " · " + job.progress[job.progress.length - 1] : "";
    status.textContent = `${job.kind} (job ${job.id}): ${job.state}, ${job.elapsed_s.toFixed(1)} s${last}`;
    status.className = job.state === "failed" ? "error" : "muted";
    if (job.state === "done") { onDone(job.result); return; }
    if (job.state === "failed") { status.textContent = `${job.kind} failed: ${job.error}`; return; }
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
}

async function startJob(kind, body, status, onDone) {
  status.className = "muted";
  status.textContent = `starting ${kind}…`;
  try {
    const started = await api(`/api/${kind}`, { method: "POST", body });
    await followJob(started.id, status, onDone);
  } catch (error) {
    status.textContent = describe(error);
    status.className = "error";
  }
}

// ---- Bench -----------------------------------------------------------------

function drawChart(node, rows, baseline, pick, { logY, unit, title }) {
  clear(node);
  const W = 720, H = 300, L = 70, R = 30, T = 28, B = 40;
  const all = [...rows, ...(baseline || [])];
  if (!all.length) return;
  const sizes = all.map((r) => r.size).filter((s) => s > 0);
  const values = all.map(pick).filter((v) => v > 0);
  const xMin = Math.log2(Math.min(...sizes)), xMax = Math.log2(Math.max(...sizes));
  const yMax = Math.max(...values, 1e-9);
  const yMin = logY ? Math.min(...values) : 0;
  const fx = (s) => L + ((Math.log2(s) - xMin) / Math.max(xMax - xMin, 1)) * (W - L - R);
  const fy = logY
      ? (v) => T + (1 - (Math.log10(v) - Math.log10(yMin)) / Math.max(Math.log10(yMax) - Math.log10(yMin), 1e-9)) * (H - T - B)
      : (v) => T + (1 - v / yMax) * (H - T - B);
  node.append(svg("text", { x: L, y: 16, class: "chart-title" }, title));
  node.append(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis-line" }));
  node.append(svg("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis-line" }));
  for (const s of [...new Set(sizes)].sort((a, b) => a - b)) {
    node.append(svg("text", { x: fx(s), y: H - B + 16, class: "axis", "text-anchor": "middle" }, sizeLabel(s)));
  }
  for (let i = 0; i <= 4; i++) {
    const v = logY ? Math.pow(10, Math.log10(yMin) + (Math.log10(yMax) - Math.log10(yMin)) * i / 4) : (yMax * i) / 4;
    node.append(svg("line", { x1: L, x2: W - R, y1: fy(v), y2: fy(v), class: "tick" }));
    node.append(svg("text", { x: L - 6, y: fy(v) + 4, class: "axis", "text-anchor": "end" },
                    unit.endsWith("us") ? formatUs(v) : v.toPrecision(3)));
  }
  const middle = (T + H - B) / 2;
  node.append(svg("text", { x: 12, y: middle, class: "axis", "text-anchor": "middle",
                            transform: `rotate(-90 12 ${middle})` }, unit));
  const series = (data, cls) => {
    const points = data.filter((r) => pick(r) > 0);
    if (!points.length) return;
    node.append(svg("polyline", { points: points.map((r) => `${fx(r.size)},${fy(pick(r))}`).join(" "), class: "series " + cls }));
    for (const r of points) {
      const dot = svg("circle", { cx: fx(r.size), cy: fy(pick(r)), r: 3, class: "dot " + cls });
      dot.append(svg("title", {}, `${formatBytes(r.size)}: ${pick(r).toPrecision(4)} ${unit}`));
      node.append(dot);
    }
  };
  if (baseline) series(baseline, "baseline");
  series(rows, "current");
  node.append(svg("text", { x: W - R - 150, y: 16, class: "legend current" }, "— this run"));
  if (baseline) node.append(svg("text", { x: W - R - 70, y: 16, class: "legend baseline" }, "- - baseline"));
}

// 1K, 64K, 4M: the sizes of a sweep, as nccl-tests' -b/-e write them.
function sizeLabel(bytes) {
  for (const [unit, scale] of [["G", 1 << 30], ["M", 1 << 20], ["K", 1 << 10]]) {
    if (bytes >= scale && bytes % scale === 0) return `${bytes / scale}${unit}`;
  }
  return `${bytes}`;
}

function renderBench() {
  const doc = state.bench;
  const baselineRows = state.baseline ? state.baseline.rows : null;
  const rows = doc ? doc.rows : [];
  const title = doc ? `${doc.op}, ${doc.ranks} ranks, ${doc.type}` : "baseline";
  drawChart($("bench-chart"), rows, baselineRows, (r) => r.busbw, { logY: false, unit: "busbw GB/s", title });
  drawChart($("bench-time-chart"), rows, baselineRows, (r) => r.time_us, { logY: true, unit: "time per op, us", title: "time per op (out of place)" });
  const table = $("bench-table");
  clear(table);
  if (!doc) return;
  table.append(el("tr", {}, ...["size", "count", "time us", "algbw", "busbw", "in-place busbw", "wrong",
                                "baseline busbw", "vs baseline"].map((h) => el("th", {}, h))));
  for (const row of rows) {
    const base = baselineRows ? baselineRows.find((b) => b.size === row.size) : null;
    table.append(el("tr", {},
      el("td", {}, formatBytes(row.size)), el("td", {}, row.count), el("td", {}, row.time_us.toFixed(1)),
      el("td", {}, row.algbw.toFixed(3)), el("td", {}, row.busbw.toFixed(3)),
      el("td", {}, row.in_place ? row.in_place.busbw.toFixed(3) : "–"),
      el("td", { class: row.wrong > 0 ? "error" : "" }, row.wrong),
      el("td", {}, base ? base.busbw.toFixed(3) : "–"),
      el("td", {}, base && base.busbw > 0 ? (row.busbw / base.busbw).toFixed(2) + "x" : "–")));
  }
  $("bench-save").disabled = false;
}

function setupBench() {
  $("bench-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const body = { op: $("bench-op").value, minbytes: $("bench-min").value, maxbytes: $("bench-max").value,
                   stepfactor: $("bench-factor").value, iters: $("bench-iters").value,
                   datatype: $("bench-dtype").value };
    startJob("bench", body, $("bench-status"), (result) => { state.bench = result; renderBench(); });
  });
  $("bench-save").addEventListener("click", () => {
    if (!state.bench) return;
    state.baseline = state.bench;
    localStorage.setItem("ccl_bench_baseline", JSON.stringify(state.bench));
    renderBench();
  });
  $("bench-baseline-file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (!file) return;
    try {
      const doc = JSON.parse(await file.text());
      if (!Array.isArray(doc.rows)) throw new Error("no \"rows\": expected the output of ccctl bench -o json");
      state.baseline = doc;
      localStorage.setItem("ccl_bench_baseline", JSON.stringify(doc));
      setBanner("baseline", null);
      renderBench();
    } catch (error) {
      setBanner("baseline", `baseline file ${file.name}: ${error.message}`);
    }
  });
  if (state.baseline) renderBench();
}

// ---- Doctor ----------------------------------------------------------------

function flaggedPairs(doc) {
  const flagged = new Set();
  for (const finding of doc.findings || []) {
    const ranks = finding.ranks || [];
    for (const cell of doc.cells) {
      const hit = finding.blame === "link"
          ? ranks.includes(cell.src) && ranks.includes(cell.dst)
          : ranks.includes(cell.src) || ranks.includes(cell.dst);
      if (hit) flagged.add(`${cell.src}/${cell.dst}`);
    }
  }
  return flagged;
}

function renderDoctor() {
  const doc = state.doctor;
  const node = $("heatmap");
  clear(node);
  const list = $("findings");
  clear(list);
  if (!doc) return;
  if (!doc.findings.length) list.append(el("li", { class: "ok" }, `healthy: nothing named (${doc.cells.length} pairs, ${doc.elapsed_s.toFixed(1)} s)`));
  for (const finding of doc.findings) {
    list.append(el("li", { class: "finding" },
      el("b", {}, `${finding.blame} ${finding.ranks.join(", ")}`),
      `: ${finding.metric} ${Number(finding.value).toPrecision(3)} against ${Number(finding.reference).toPrecision(3)}. ${finding.evidence} `,
      el("span", { class: "muted" }, finding.next_step || "")));
  }
  const metric = $("doctor-metric").value;
  const ranks = doc.ranks.map((r) => r.rank);
  const n = ranks.length;
  const cellSize = Math.max(18, Math.min(56, Math.floor(640 / Math.max(n, 1))));
  const left = 90, top = 40;
  const W = left + n * cellSize + 10, H = top + n * cellSize + 10;
  node.setAttribute("viewBox", `0 0 ${W} ${H}`);
  node.setAttribute("width", W);
  node.setAttribute("height", H);
  const values = doc.cells.map((c) => c[metric]).filter((v) => v > 0).sort((a, b) => a - b);
  const median = values.length ? values[Math.floor(values.length / 2)] : 1;
  const flagged = flaggedPairs(doc);
  const index = new Map(ranks.map((r, i) => [r, i]));
  const hostOf = new Map(doc.ranks.map((r) => [r.rank, r.host]));
  ranks.forEach((rank, i) => {
    node.append(svg("text", { x: left - 6, y: top + i * cellSize + cellSize / 2 + 4, class: "axis", "text-anchor": "end" },
                    `${rank} ${hostOf.get(rank) || ""}`.slice(0, 14)));
    node.append(svg("text", { x: left + i * cellSize + cellSize / 2, y: top - 8, class: "axis", "text-anchor": "middle" }, rank));
  });
  for (const cell of doc.cells) {
    const value = cell[metric];
    // Against the median of all cells, on a log scale: green at or above
    // it, red at an eighth of it (either metric, latency inverted). What is
    // slow enough to name is the doctor's verdict: the outlined cells.
    const ratio = value > 0 ? (metric === "latency_us" ? median / value : value / median) : 0;
    const hue = ratio > 0 ? Math.max(0, Math.min(1, 1 + Math.log2(ratio) / 3)) * 120 : 0;
    const x = left + index.get(cell.dst) * cellSize, y = top + index.get(cell.src) * cellSize;
    const isFlagged = flagged.has(`${cell.src}/${cell.dst}`);
    const rect = svg("rect", { x: x + 1, y: y + 1, width: cellSize - 2, height: cellSize - 2,
                               fill: `hsl(${hue.toFixed(0)}, 70%, 50%)`,
                               class: "cell" + (isFlagged ? " flagged" : "") + (cell.wrong ? " wrong" : ""),
                               "data-src": cell.src, "data-dst": cell.dst });
    rect.append(svg("title", {}, `${cell.src} → ${cell.dst}: ${cell.bandwidth_gbps.toFixed(3)} GB/s, ${cell.latency_us.toFixed(1)} us` +
                                  (cell.wrong ? `, ${cell.wrong} wrong elements` : "")));
    rect.addEventListener("click", () => {
      state.pair = [cell.src, cell.dst];
      location.hash = "#timeline";
    });
    node.append(rect);
    if (cellSize >= 40) {
      node.append(svg("text", { x: x + cellSize / 2, y: y + cellSize / 2 + 4, class: "cell-label", "text-anchor": "middle" },
                      metric === "latency_us" ? value.toFixed(0) : value.toFixed(2)));
    }
  }
}

function setupDoctor() {
  $("doctor-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const body = { size: $("doctor-size").value, iters: $("doctor-iters").value,
                   bisect: $("doctor-bisect").checked };
    startJob("doctor", body, $("doctor-status"), (result) => { state.doctor = result; renderDoctor(); });
  });
  $("doctor-metric").addEventListener("change", renderDoctor);
}

// The latest finished bench and doctor runs, so a reload keeps them.
async function loadJobs() {
  try {
    const { jobs } = await api("/api/jobs");
    for (const kind of ["bench", "doctor"]) {
      const latest = jobs.find((job) => job.kind === kind && job.state === "done");
      if (!latest) continue;
      const job = await api(`/api/jobs/${latest.id}`);
      if (kind === "bench" && !state.bench) { state.bench = job.result; renderBench(); }
      if (kind === "doctor" && !state.doctor) { state.doctor = job.result; renderDoctor(); }
    }
    state.jobsLoaded = true;
  } catch (error) {
    // The pages say what failed when they poll.
  }
}

// ---- Pages -----------------------------------------------------------------

function showPage() {
  const page = (location.hash || "#world").slice(1).split("?")[0] || "world";
  state.page = ["world", "ops", "timeline", "bench", "doctor"].includes(page) ? page : "world";
  for (const section of document.querySelectorAll(".page")) {
    section.hidden = section.id !== "page-" + state.page;
  }
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("active", link.dataset.page === state.page);
  }
  if (state.page !== "timeline") state.pair = state.page === "doctor" ? null : state.pair;
  if (state.page === "ops") pollOps();
  if (state.page === "timeline") loadTimeline();
}

function start() {
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.token = $("token-input").value.trim();
    sessionStorage.setItem("ccl_console_token", state.token);
    $("token-form").hidden = true;
    $("token-input").value = "";
    loadSession();
    pollWorld();
    loadJobs();
  });
  $("token-cancel").addEventListener("click", () => { $("token-form").hidden = true; });
  $("sign-in").addEventListener("click", showTokenForm);
  $("ops-group").addEventListener("change", pollOps);
  setupTimeline();
  setupBench();
  setupDoctor();
  window.addEventListener("hashchange", showPage);
  window.addEventListener("resize", () => { if (state.page === "timeline") renderTimeline(); });
  loadSession();
  showPage();
  pollWorld();
  loadJobs();
  // Each poll waits for the one before it: an unreachable cluster (a 5 s
  // deadline) must not pile requests up.
  repeat(pollWorld, 1000);
  repeat(() => (state.page === "ops" ? pollOps() : null), 2000);
}

async function repeat(poll, ms) {
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, ms));
    await poll();
  }
}

document.addEventListener("DOMContentLoaded", start);
