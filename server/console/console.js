// Sluice's console: plain JavaScript over the console's JSON endpoints
// (/api/...), which answer the HTTP API's bodies. No build step, no
// dependency, no network access beyond this server.
"use strict";

const state = { ws: null, ns: null, interval: "1m" };
const $ = (sel) => document.querySelector(sel);
const SVG = "http://www.w3.org/2000/svg";

// api calls a console endpoint and returns its JSON, or throws an Error
// with the API error's detail and field errors.
async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  };
  const res = await fetch(path, init);
  const json = await res.json();
  if (!res.ok) {
    const e = json.error || {};
    let msg = e.detail || e.title || "request failed (" + res.status + ")";
    if (e.errors) msg += " — " + e.errors.map((x) => x.location + ": " + x.message).join("; ");
    throw new Error(msg);
  }
  return json;
}

// call calls an API endpoint in the selected workspace.
function call(name, body) {
  return api("/api/workspaces/" + encodeURIComponent(state.ws) + "/v2/ratelimit." + name, body);
}

function showError(msg) {
  $("#error").textContent = msg;
  $("#error").hidden = !msg;
}

async function loadNamespaces() {
  let data;
  try {
    ({ data } = await api("/api/namespaces"));
  } catch (e) {
    return; // the list keeps its last state; the next poll retries
  }
  const ul = $("#namespaces");
  ul.replaceChildren();
  for (const k of data) {
    const li = document.createElement("li");
    li.dataset.workspace = k.workspace;
    li.dataset.namespace = k.namespace;
    li.classList.toggle("selected", k.workspace === state.ws && k.namespace === state.ns);
    const a = document.createElement("a");
    a.href = "#";
    a.textContent = k.namespace;
    a.addEventListener("click", (ev) => {
      ev.preventDefault();
      select(k.workspace, k.namespace);
    });
    const ws = document.createElement("small");
    ws.textContent = k.workspace;
    li.append(a, " ", ws);
    ul.append(li);
  }
  $("#empty").hidden = data.length > 0;
}

function select(ws, ns) {
  state.ws = ws;
  state.ns = ns;
  $("#detail").hidden = false;
  $("#title").textContent = ns;
  $("#subtitle").textContent = "workspace " + ws;
  showError("");
  loadNamespaces();
  refresh();
  loadOverrides();
}

async function refresh() {
  if (!state.ns) return;
  const ns = state.ns;
  let data;
  try {
    ({ data } = await call("getAnalytics", { namespace: ns, interval: state.interval }));
  } catch (e) {
    showError(e.message);
    return;
  }
  if (ns !== state.ns) return; // another namespace was selected meanwhile
  drawChart(data);
  fillTop("#top-denied", data.top.denied);
  fillTop("#top-requests", data.top.requests);
  $("#totals").textContent = data.totals.requests + " requests, " + data.totals.denied +
    " denied over the top lists' window" + (data.tracked ? "" : " (not tracked: no decision, or beyond the cap)");
}

// drawChart draws the passed and denied series as two lines.
function drawChart(data) {
  const svg = $("#chart");
  svg.replaceChildren();
  const s = data.series;
  const W = 800, H = 220, top = 10, bottom = 20, left = 40;
  let max = 1;
  for (const p of s) max = Math.max(max, p.passed, p.denied);
  const x = (i) => left + (i * (W - left - 5)) / Math.max(1, s.length - 1);
  const y = (v) => H - bottom - (v * (H - top - bottom)) / max;
  const el = (name, attrs, text) => {
    const e = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
    return e;
  };
  el("line", { class: "grid", x1: left, y1: y(0), x2: W, y2: y(0) });
  el("line", { class: "grid", x1: left, y1: y(max), x2: W, y2: y(max) });
  el("text", { x: 2, y: y(max) + 4 }, String(max));
  el("text", { x: 2, y: y(0) + 4 }, "0");
  if (s.length > 0) {
    const fmt = (t) => new Date(t).toLocaleTimeString();
    el("text", { x: left, y: H - 4 }, fmt(s[0].time));
    el("text", { x: W - 70, y: H - 4 }, fmt(s[s.length - 1].time));
  }
  for (const key of ["passed", "denied"]) {
    const pts = s.map((p, i) => x(i).toFixed(1) + "," + y(p[key]).toFixed(1)).join(" ");
    el("polyline", { class: key, points: pts });
  }
}

// fillTop fills a top list's table; each row can start an override for
// its identifier.
function fillTop(sel, list) {
  const body = $(sel + " tbody");
  const json = JSON.stringify(list);
  if (body.dataset.json === json) return; // unchanged: keep the rows (and their buttons)
  body.dataset.json = json;
  body.replaceChildren();
  for (const h of list) {
    const tr = document.createElement("tr");
    const id = document.createElement("td");
    id.className = "identifier";
    id.textContent = h.identifier;
    const count = document.createElement("td");
    count.textContent = h.count;
    const err = document.createElement("td");
    err.textContent = h.error;
    const act = document.createElement("td");
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = "override";
    b.addEventListener("click", () => editOverride({ identifier: h.identifier, limit: "", duration: 60000 }));
    act.append(b);
    tr.append(id, count, err, act);
    body.append(tr);
  }
}

async function loadOverrides() {
  const body = $("#overrides tbody");
  let res;
  try {
    res = await call("listOverrides", { namespace: state.ns, limit: 100 });
  } catch (e) {
    body.replaceChildren();
    showError(e.message);
    return;
  }
  body.replaceChildren();
  for (const o of res.data) {
    const tr = document.createElement("tr");
    tr.dataset.identifier = o.identifier;
    const cells = [o.identifier, o.limit, o.duration].map((v) => {
      const td = document.createElement("td");
      td.textContent = v;
      return td;
    });
    cells[0].className = "identifier";
    const act = document.createElement("td");
    const edit = document.createElement("button");
    edit.type = "button";
    edit.className = "edit";
    edit.textContent = "edit";
    edit.addEventListener("click", () => editOverride(o));
    const del = document.createElement("button");
    del.type = "button";
    del.className = "delete";
    del.textContent = "delete";
    del.addEventListener("click", () => deleteOverride(o.identifier));
    act.append(edit, " ", del);
    tr.append(...cells, act);
    body.append(tr);
  }
  $("#overrides-more").hidden = !(res.pagination && res.pagination.hasMore);
}

function editOverride(o) {
  $("#override-identifier").value = o.identifier;
  $("#override-limit").value = o.limit;
  $("#override-duration").value = o.duration;
  $("#override-limit").focus();
}

async function saveOverride(ev) {
  ev.preventDefault();
  try {
    await call("setOverride", {
      namespace: state.ns,
      identifier: $("#override-identifier").value,
      limit: Number($("#override-limit").value),
      duration: Number($("#override-duration").value),
    });
    showError("");
    $("#override-form").reset();
  } catch (e) {
    showError(e.message);
  }
  loadOverrides();
}

async function deleteOverride(identifier) {
  try {
    await call("deleteOverride", { namespace: state.ns, identifier });
    showError("");
  } catch (e) {
    showError(e.message);
  }
  loadOverrides();
}

function init() {
  $("#override-form").addEventListener("submit", saveOverride);
  $("#open-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    select($("#open-workspace").value, $("#open-namespace").value);
  });
  for (const b of document.querySelectorAll(".interval")) {
    b.addEventListener("click", () => {
      state.interval = b.dataset.interval;
      for (const o of document.querySelectorAll(".interval")) o.classList.toggle("selected", o === b);
      refresh();
    });
  }
  loadNamespaces();
  setInterval(refresh, 1000);
  setInterval(loadNamespaces, 5000);
}

init();
