// The analyst's page of the dpmarginals service: campaigns, a marginal as a table and a
// heatmap with its standard errors, measured or reconstructed, and a CSV download.
//
// Plain JavaScript, no build step and nothing from elsewhere.  It reads the service's JSON
// API only (GET /campaigns, /campaigns/{id}/status, /plan, /marginals).  Every text that
// comes from the API (campaign ids, attribute names, labels, error reasons) is put into the
// page as text (textContent, text nodes, SVG <text>/<title>), never parsed as HTML.
"use strict";

const API_ROOT = new URL("..", window.location.href);  // the page lives at <root>/ui/
const TOKEN_KEY = "dpmarginals.token";
const SVG_NS = "http://www.w3.org/2000/svg";
const Z95 = 1.959964;  // the normal 97.5% quantile: a 95% interval is value ± Z95 * std

const state = { campaign: null, plan: null, status: null, chosen: [], result: null, ticket: 0 };

// -- small DOM helpers -------------------------------------------------------------------
const $ = (id) => document.getElementById(id);

/** An element with properties (class, data-*, title, ...) and text or element children. */
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, String(value));
    else node[key] = value;
  }
  node.append(...children.map((c) => (c instanceof Node ? c : String(c))));
  return node;
}

/** An SVG element with attributes; ``text`` (optional) as its text content. */
function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== null) node.textContent = String(text);
  return node;
}

function show(node, visible) { node.hidden = !visible; }

function message(id, text, kind = "error") {
  const node = $(id);
  node.textContent = text || "";
  node.className = "message" + (text ? " " + kind : "");
}

// -- the API -----------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, code, reason) {
    super(reason);
    this.status = status;
    this.code = code;
    this.reason = reason;
  }
  describe() {
    const where = this.status ? `HTTP ${this.status}, ${this.code}` : this.code;
    return `${this.reason} (${where})`;
  }
}

function token() { return window.sessionStorage.getItem(TOKEN_KEY) || ""; }

/** GET ``path`` (relative to the service root) as JSON; errors as ApiError with the
 *  service's {"error", "reason"}. */
async function api(path, params = {}) {
  const url = new URL(path, API_ROOT);
  for (const [key, value] of Object.entries(params)) url.searchParams.set(key, value);
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  let response;
  try {
    response = await fetch(url, { headers, credentials: "omit", cache: "no-store" });
  } catch (exc) {
    throw new ApiError(0, "network", `the service did not answer (${exc.message})`);
  }
  const text = await response.text();
  let body = null;
  try { body = JSON.parse(text); } catch { body = null; }
  if (!response.ok) {
    const ok = body !== null && typeof body === "object";
    const code = ok && typeof body.error === "string" ? body.error : `http_${response.status}`;
    let reason = ok && typeof body.reason === "string" ? body.reason : "";
    if (!reason && ok && body.detail !== undefined) reason = JSON.stringify(body.detail);
    if (!reason) reason = text.slice(0, 300) || response.statusText || "no reason given";
    throw new ApiError(response.status, code, reason);
  }
  if (body === null) throw new ApiError(response.status, "not_json", "the answer is not JSON");
  return body;
}

const campaignPath = (id, what) => `campaigns/${encodeURIComponent(id)}/${what}`;

// -- formatting --------------------------------------------------------------------------
const fmt = (x) => (Number.isFinite(x) ? x.toFixed(4) : "—");
const hash = (h) => (typeof h === "string" ? h.slice(0, 12) : "—");
const count = (n) => (Number.isFinite(n) ? n.toLocaleString("en-US") : "—");
const plural = (n, word) => `${count(n)} ${word}${n === 1 ? "" : "s"}`;

/** The public names of the values of attribute ``a`` in an answer (labels or codes). */
function valueNames(answer, a, size) {
  const names = answer.labels && Array.isArray(answer.labels[a]) ? answer.labels[a] : null;
  return Array.from({ length: size }, (_, i) => (names ? String(names[i]) : String(i)));
}

/** Every cell of an answer in C order: its value names per attribute, value and std. */
function cells(answer) {
  const names = answer.attributes.map((a, j) => valueNames(answer, a, answer.sizes[j]));
  return answer.values.map((value, flat) => {
    const codes = [];
    let rest = flat;
    for (let j = answer.sizes.length - 1; j >= 0; j--) {
      codes.unshift(rest % answer.sizes[j]);
      rest = Math.floor(rest / answer.sizes[j]);
    }
    const std = Array.isArray(answer.std) ? answer.std[flat] : null;
    return { codes, labels: codes.map((c, j) => names[j][c]), value, std };
  });
}

// -- the token ---------------------------------------------------------------------------
function setupToken() {
  $("token").value = token();
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const given = $("token").value.trim();
    if (/[^\x21-\x7e]/.test(given)) {
      message("campaigns-message", "A token has printable ASCII characters only (no spaces).");
      return;
    }
    window.sessionStorage.setItem(TOKEN_KEY, given);
    loadCampaigns();
  });
  $("forget-token").addEventListener("click", () => {
    window.sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    loadCampaigns();
  });
}

// -- campaigns ---------------------------------------------------------------------------
async function loadHealth() {
  try {
    const health = await api("health");
    $("service").textContent =
      `Service ${API_ROOT.origin} · version ${health.version} · store ${health.store}`;
  } catch (exc) {
    $("service").textContent = `Service ${API_ROOT.origin}: ${exc.describe()}`;
  }
}

async function loadCampaigns() {
  const body = $("campaign-table").tBodies[0];
  message("campaigns-message", "Loading campaigns…", "info");
  let listed;
  try {
    listed = await api("campaigns");
  } catch (exc) {
    body.replaceChildren();
    show($("campaign-table"), false);
    const hint = exc.status === 401 || exc.status === 403
      ? " Enter a token above, or open a campaign by its id." : "";
    message("campaigns-message", `Cannot list the campaigns: ${exc.describe()}.${hint}`);
    return;
  }
  const campaigns = Array.isArray(listed.campaigns) ? listed.campaigns : [];
  const rows = await Promise.all(campaigns.map(async (c) => {
    try {
      return { id: c.id, status: await api(campaignPath(c.id, "status")) };
    } catch (exc) {
      return { id: c.id, error: exc };
    }
  }));
  body.replaceChildren(...rows.map(campaignRow));
  show($("campaign-table"), rows.length > 0);
  message("campaigns-message", campaignsNote(rows.length, Boolean(token())), "info");
}

/** Without a token the service lists the public campaigns only: say so, rather than
 *  "No campaigns yet." when private ones may exist. */
function campaignsNote(listed, withToken) {
  if (withToken) return listed ? "" : "No campaigns yet.";
  const privateToo = "Campaigns are private unless created public: enter a token above " +
    "to list the private ones too, or open a campaign by its id.";
  return listed ? `Public campaigns only. ${privateToo}` : `No public campaigns. ${privateToo}`;
}

function campaignRow({ id, status, error }) {
  const open = el("button", { type: "button", class: "secondary" }, "Open");
  open.addEventListener("click", () => openCampaign(id));
  const cells = error
    ? [el("td", { colSpan: 5, class: "error-text" }, error.describe())]
    : [el("td", {}, String(status.method ?? "—")),
       el("td", { class: "num" }, String(status.epsilon ?? "—")),
       el("td", { class: "num", "data-reports": status.reports ?? "" }, count(status.reports)),
       el("td", { class: "num" }, Array.isArray(status.groups) ? String(status.groups.length) : "—"),
       el("td", { class: "mono", title: String(status.plan_hash ?? "") }, hash(status.plan_hash))];
  const row = el("tr", { "data-campaign": id }, el("td", { class: "mono" }, id), ...cells,
                 el("td", {}, open));
  if (id === state.campaign) row.classList.add("active");
  return row;
}

// -- one campaign: choosing a marginal ----------------------------------------------------
/** attribute -> number of values, from a plan's domain (the answer domain when encoded): a
 * list of [name, spec] pairs (plan version 2) or an object (version 1). */
function answerDomain(plan) {
  const domain = (plan.params && plan.params.encoded_from) || plan.domain || {};
  const pairs = Array.isArray(domain) ? domain : Object.entries(domain);
  return pairs.map(([name, spec]) => {
    let size;
    if (typeof spec === "number") size = spec;
    else if (Array.isArray(spec)) size = spec.length;
    else {
      size = Array.isArray(spec.labels) ? spec.labels.length
        : Array.isArray(spec.bins) ? spec.bins.length - 1 : NaN;
      if (spec.other) size += 1;
    }
    return { name, size };
  });
}

async function openCampaign(id) {
  state.campaign = id;
  state.result = null;
  state.ticket += 1;
  show($("result"), false);
  for (const row of $("campaign-table").tBodies[0].rows) {
    row.classList.toggle("active", row.dataset.campaign === id);
  }
  $("query-campaign").textContent = id;
  show($("query"), true);
  message("query-message", "Loading the campaign…", "info");
  let plan, status;
  try {
    [plan, status] = await Promise.all([api(campaignPath(id, "plan")),
                                        api(campaignPath(id, "status"))]);
  } catch (exc) {
    message("query-message", `Cannot open campaign ${id}: ${exc.describe()}`);
    $("attribute-list").replaceChildren();
    $("measured-select").replaceChildren();
    return;
  }
  if (state.campaign !== id) return;
  state.plan = plan;
  state.status = status;
  state.chosen = [];
  $("query-summary").textContent =
    `${status.method ?? plan.method}, ε = ${status.epsilon ?? plan.epsilon}, ` +
    `${count(status.reports)} reports in ${plural((plan.groups || []).length, "group")}, ` +
    `plan ${hash(plan.hash)}`;
  renderAttributes();
  renderMeasured();
  message("query-message", "");
}

function renderAttributes() {
  const list = answerDomain(state.plan).map(({ name, size }) => {
    const box = el("input", { type: "checkbox", value: name });
    box.addEventListener("change", () => {
      state.chosen = box.checked ? [...state.chosen, name] : state.chosen.filter((a) => a !== name);
      syncQuery();
    });
    return el("label", { class: "check", "data-attribute": name }, box, name,
              el("span", { class: "muted small" }, ` (${size})`));
  });
  $("attribute-list").replaceChildren(...list);
  syncQuery();
}

function renderMeasured() {
  const seen = new Map();
  for (const group of state.status.groups || []) {
    const key = JSON.stringify(group.attributes);
    const entry = seen.get(key) || { attributes: group.attributes, reports: 0, groups: 0 };
    entry.reports += Number(group.reports) || 0;
    entry.groups += 1;
    seen.set(key, entry);
  }
  const options = [el("option", { value: "" }, "— choose —")];
  for (const [key, entry] of seen) {
    options.push(el("option", { value: key },
                    `${entry.attributes.join(" × ")}  (${count(entry.reports)} reports)`));
  }
  const select = $("measured-select");
  select.replaceChildren(...options);
  select.onchange = () => {
    if (!select.value) return;
    setChosen(JSON.parse(select.value));
  };
}

function setChosen(attributes) {
  state.chosen = [...attributes];
  syncQuery();
}

function syncQuery() {
  for (const box of $("attribute-list").querySelectorAll("input")) {
    box.checked = state.chosen.includes(box.value);
  }
  $("query-attrs").textContent = state.chosen.length ? state.chosen.join(" × ") : "none";
  $("swap").disabled = state.chosen.length < 2;
  $("show").disabled = state.chosen.length === 0;
}

// -- the marginal ------------------------------------------------------------------------
async function showMarginal() {
  const id = state.campaign;
  const attributes = [...state.chosen];
  if (!id || !attributes.length) return;
  const ticket = ++state.ticket;
  const phase = (name) => {  // for scripts and tests: which request the page has finished
    if (ticket !== state.ticket) return;
    $("query").dataset.ticket = String(ticket);
    $("query").dataset.phase = name;
  };
  phase("loading");
  const params = { attributes: attributes.join(",") };
  message("query-message", "Estimating…", "info");
  let answer;
  try {
    answer = await api(campaignPath(id, "marginals"), params);
  } catch (exc) {
    if (ticket !== state.ticket) return;
    show($("result"), false);
    message("query-message", `No marginal: ${exc.describe()}`);
    phase("done");
    return;
  }
  if (ticket !== state.ticket) return;
  message("query-message", "");
  const wantStd = $("want-std").checked;
  renderResult(id, answer, wantStd ? "Standard errors: computing…" : "");
  if (wantStd) {
    try {
      const withStd = await api(campaignPath(id, "marginals"), { ...params, std: "true" });
      if (ticket === state.ticket) renderResult(id, withStd, stdNote(withStd));
    } catch (exc) {
      if (ticket === state.ticket) {
        $("std-text").textContent = `Standard errors unavailable: ${exc.describe()}`;
      }
    }
  }
  phase("done");
}

function stdNote(answer) {
  if (!Array.isArray(answer.std)) return "The service gave no standard errors.";
  return answer.reconstructed
    ? "Standard errors (parametric bootstrap) are model-based: they assume the model that " +
      "reconstructed the table. 95% intervals: value ± 1.96 std."
    : "Standard errors from the oracles' variances (and the groups' sampling). " +
      "95% intervals: value ± 1.96 std.";
}

function renderResult(id, answer, note) {
  state.result = { campaign: id, answer };
  const attrs = answer.attributes;
  $("result-title").textContent = `${attrs.join(" × ")} · ${id} · ${count(answer.reports)} reports`;
  const badge = $("basis");
  if (answer.reconstructed === true) {
    badge.textContent = "reconstructed";
    badge.className = "badge reconstructed";
    const parts = (answer.measured || []).map((m) => m.join(" × ")).join("; ") || "nothing";
    $("basis-text").textContent = `No report measured ${attrs.join(", ")} together: the ` +
      `table is reconstructed by the method's model (maximum entropy or a graphical model) ` +
      `from what was measured: ${parts}.`;
  } else if (answer.reconstructed === false) {
    badge.textContent = "measured";
    badge.className = "badge measured";
    $("basis-text").textContent = `Measured: ${attrs.join(", ")} were measured together.`;
  } else {
    badge.textContent = "basis unknown";
    badge.className = "badge";
    $("basis-text").textContent = "";
  }
  $("std-text").textContent = note;
  const hasStd = Array.isArray(answer.std);
  show($("color-by-row"), hasStd && attrs.length === 2);
  if (!hasStd) document.querySelector("input[name=color-by][value=values]").checked = true;
  renderChart();
  renderTable(answer);
  show($("result"), true);
}

function renderTable(answer) {
  const hasStd = Array.isArray(answer.std);
  const head = [...answer.attributes.map((a) => el("th", {}, a)),
                el("th", { class: "num" }, "fraction")];
  if (hasStd) head.push(el("th", { class: "num" }, "std"), el("th", { class: "num" }, "95% interval"));
  $("marginal-table").tHead.replaceChildren(el("tr", {}, ...head));
  const rows = cells(answer).map((cell) => {
    const tds = cell.labels.map((label) => el("td", { class: "label" }, label));
    tds.push(el("td", { class: "num value", "data-value": cell.value, title: String(cell.value) },
                fmt(cell.value)));
    if (hasStd) {
      tds.push(el("td", { class: "num std", "data-value": cell.std, title: String(cell.std) },
                  fmt(cell.std)));
      tds.push(el("td", { class: "num muted" }, `${fmt(Math.max(0, cell.value - Z95 * cell.std))}` +
                  ` – ${fmt(cell.value + Z95 * cell.std)}`));
    }
    return el("tr", {}, ...tds);
  });
  $("marginal-table").tBodies[0].replaceChildren(...rows);
}

// -- charts: a heatmap for 2-way marginals, bars for 1-way --------------------------------
const BLUES = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];

function blue(t) {
  const x = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0)) * (BLUES.length - 1);
  const i = Math.min(BLUES.length - 2, Math.floor(x));
  const f = x - i;
  const rgb = BLUES[i].map((c, k) => Math.round(c + f * (BLUES[i + 1][k] - c)));
  return { fill: `rgb(${rgb.join(",")})`, dark: x > 2.2 };
}

function clip(text, n) { return text.length > n ? `${text.slice(0, n - 1)}…` : text; }

function renderChart() {
  const chart = $("chart");
  const answer = state.result && state.result.answer;
  if (!answer) { chart.replaceChildren(); return; }
  if (answer.attributes.length === 2) chart.replaceChildren(heatmap(answer));
  else if (answer.attributes.length === 1) chart.replaceChildren(bars(answer));
  else {
    chart.replaceChildren(el("p", { class: "muted" },
      "The heatmap shows 2-way marginals (and bars 1-way ones); this one is in the table."));
  }
}

function tooltip(cell, attrs) {
  const where = attrs.map((a, j) => `${a} = ${cell.labels[j]}`).join(", ");
  const std = Number.isFinite(cell.std) ? ` ± ${fmt(cell.std)} (std)` : "";
  return `${where}: ${fmt(cell.value)}${std}`;
}

function heatmap(answer) {
  const [rowAttr, colAttr] = answer.attributes;
  const [nRows, nCols] = answer.sizes;
  const byStd = Array.isArray(answer.std) &&
    document.querySelector("input[name=color-by]:checked").value === "std";
  const all = cells(answer);
  const shade = all.map((c) => (byStd ? c.std : c.value));
  const top = Math.max(...shade.filter(Number.isFinite), 1e-12);
  const rowNames = valueNames(answer, rowAttr, nRows).map((s) => clip(s, 22));
  const colNames = valueNames(answer, colAttr, nCols).map((s) => clip(s, 22));
  const cw = Math.max(16, Math.min(72, Math.floor(640 / nCols)));
  const ch = Math.max(14, Math.min(40, Math.floor(480 / nRows)));
  const left = 28 + 7 * Math.max(...rowNames.map((s) => s.length), 2);
  const colText = 7 * Math.max(...colNames.map((s) => s.length), 2);
  const rotate = colText > cw - 4;
  const head = 40 + (rotate ? Math.ceil(colText * 0.72) : 16);
  const width = left + nCols * cw + 90;
  const height = head + nRows * ch + 12;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                            class: "heatmap", "aria-label": `heatmap of ${rowAttr} × ${colAttr}` });
  root.append(svg("text", { x: left, y: 14, class: "axis" }, colAttr));
  root.append(svg("text", { x: 12, y: head + (nRows * ch) / 2, class: "axis",
                            transform: `rotate(-90 12 ${head + (nRows * ch) / 2})`,
                            "text-anchor": "middle" }, rowAttr));
  colNames.forEach((name, j) => {
    const x = left + j * cw + cw / 2;
    const attrs = rotate
      ? { x, y: head - 6, transform: `rotate(-45 ${x} ${head - 6})`, "text-anchor": "start" }
      : { x, y: head - 6, "text-anchor": "middle" };
    root.append(svg("text", { ...attrs, class: "tick" }, name));
  });
  rowNames.forEach((name, i) => {
    root.append(svg("text", { x: left - 6, y: head + i * ch + ch / 2 + 4, class: "tick",
                              "text-anchor": "end" }, name));
  });
  all.forEach((cell, flat) => {
    const [i, j] = cell.codes;
    const color = blue(shade[flat] / top);
    const rect = svg("rect", { x: left + j * cw, y: head + i * ch, width: cw - 1, height: ch - 1,
                               fill: color.fill, class: "cell", "data-value": cell.value,
                               "data-row": i, "data-col": j });
    rect.append(svg("title", {}, tooltip(cell, answer.attributes)));
    root.append(rect);
    if (cw >= 44 && ch >= 16) {
      root.append(svg("text", { x: left + j * cw + cw / 2, y: head + i * ch + ch / 2 + 4,
                                "text-anchor": "middle",
                                class: color.dark ? "in-cell dark" : "in-cell" },
                      (byStd ? cell.std : cell.value).toFixed(3)));
    }
  });
  // the legend: 0 .. the largest value
  const lx = left + nCols * cw + 24;
  const steps = 24;
  const lh = Math.min(160, nRows * ch);
  for (let s = 0; s < steps; s++) {
    root.append(svg("rect", { x: lx, y: head + lh - (s + 1) * (lh / steps), width: 14,
                              height: lh / steps + 0.5, fill: blue(s / (steps - 1)).fill }));
  }
  root.append(svg("text", { x: lx + 18, y: head + 8, class: "tick" }, top.toFixed(3)));
  root.append(svg("text", { x: lx + 18, y: head + lh, class: "tick" }, "0"));
  root.append(svg("text", { x: lx, y: head - 6, class: "tick" }, byStd ? "std" : "fraction"));
  return root;
}

function bars(answer) {
  const [attr] = answer.attributes;
  const all = cells(answer);
  const names = all.map((c) => clip(c.labels[0], 28));
  const hi = all.map((c) => c.value + (Number.isFinite(c.std) ? Z95 * c.std : 0));
  const top = Math.max(...hi, 1e-12);
  const left = 16 + 7 * Math.max(...names.map((s) => s.length), 2);
  const plot = 520;
  const bh = 22;
  const width = left + plot + 80;
  const height = 30 + all.length * bh + 10;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                            class: "bars", "aria-label": `bar chart of ${attr}` });
  root.append(svg("text", { x: left, y: 16, class: "axis" },
                  `${attr}: fraction${Number.isFinite(all[0]?.std) ? " with 95% intervals" : ""}`));
  all.forEach((cell, i) => {
    const y = 28 + i * bh;
    root.append(svg("text", { x: left - 6, y: y + bh / 2 + 3, class: "tick", "text-anchor": "end" },
                    names[i]));
    const bar = svg("rect", { x: left, y: y + 3, width: Math.max(0, (cell.value / top) * plot),
                              height: bh - 6, fill: blue(0.7).fill, class: "cell",
                              "data-value": cell.value });
    bar.append(svg("title", {}, tooltip(cell, answer.attributes)));
    root.append(bar);
    if (Number.isFinite(cell.std)) {
      const x0 = left + (Math.max(0, cell.value - Z95 * cell.std) / top) * plot;
      const x1 = left + ((cell.value + Z95 * cell.std) / top) * plot;
      root.append(svg("line", { x1: x0, x2: x1, y1: y + bh / 2, y2: y + bh / 2, class: "whisker" }));
      for (const x of [x0, x1]) {
        root.append(svg("line", { x1: x, x2: x, y1: y + 6, y2: y + bh - 6, class: "whisker" }));
      }
    }
    root.append(svg("text", { x: left + plot + 8, y: y + bh / 2 + 3, class: "tick" },
                    fmt(cell.value)));
  });
  return root;
}

// -- CSV ---------------------------------------------------------------------------------
/** One CSV field (RFC 4180 quoting).  Text cells that a spreadsheet would run as a formula
 *  (starting with =, +, -, @, tab or CR) get a leading apostrophe. */
function csvField(value, isText) {
  let text = String(value);
  if (isText && /^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** The shown table as CSV: one row per cell, as the API's ``format=csv`` (the attributes'
 *  value names, then ``fraction`` and, when known, ``std``). */
function toCsv(answer) {
  const hasStd = Array.isArray(answer.std);
  const header = [...answer.attributes, "fraction", ...(hasStd ? ["std"] : [])];
  const lines = [header.map((h) => csvField(h, true)).join(",")];
  for (const cell of cells(answer)) {
    const row = cell.labels.map((label) => csvField(label, true));
    row.push(String(cell.value));
    if (hasStd) row.push(String(cell.std));
    lines.push(row.join(","));
  }
  return lines.join("\n") + "\n";
}

function downloadCsv() {
  if (!state.result) return;
  const { campaign, answer } = state.result;
  const blob = new Blob([toCsv(answer)], { type: "text/csv" });
  const url = URL.createObjectURL(blob);
  const name = `${campaign}_${answer.attributes.join("-")}`.replace(/[^A-Za-z0-9._-]+/g, "_");
  const link = el("a", { href: url, download: `${name.slice(0, 120)}.csv` });
  document.body.append(link);
  link.click();
  link.remove();
  window.setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// -- start -------------------------------------------------------------------------------
function start() {
  setupToken();
  $("refresh").addEventListener("click", loadCampaigns);
  $("open-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = $("open-id").value.trim();
    if (id) openCampaign(id);
  });
  $("swap").addEventListener("click", () => setChosen([...state.chosen].reverse()));
  $("show").addEventListener("click", showMarginal);
  $("download").addEventListener("click", downloadCsv);
  for (const radio of document.querySelectorAll("input[name=color-by]")) {
    radio.addEventListener("change", renderChart);
  }
  loadHealth();
  loadCampaigns();
}

start();
