// Sluice's console: plain JavaScript over the console's JSON endpoints
// (/api/...), which answer the HTTP API's bodies. No build step, no
// dependency, no network access beyond this server.
//
// Every view has its own URL, in the fragment: "#/" is the first page
// (every namespace with its last hour's totals) and
// "#/ws/<workspace>/ns/<namespace>" a namespace's view, each name escaped
// with encodeURIComponent. Following a link, the back and forward buttons
// and opening a URL directly all go through route().
"use strict";

const state = { view: null, ws: null, ns: null, interval: "1m", generation: 0 };
const $ = (sel) => document.querySelector(sel);
const SVG = "http://www.w3.org/2000/svg";
const NOT_FOUND = "https://unkey.com/docs/errors/unkey/data/ratelimit_namespace_not_found";

// api calls a console endpoint and returns its JSON, or throws an Error
// with the API error's detail and field errors, its status and its type.
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
    const err = new Error(msg);
    err.status = res.status;
    err.type = e.type;
    throw err;
  }
  return json;
}

// call calls an API endpoint in the selected workspace.
function call(name, body) {
  return api("/api/workspaces/" + encodeURIComponent(state.ws) + "/v2/ratelimit." + name, body);
}

// namespaceURL is the fragment of a namespace's view.
function namespaceURL(ws, ns) {
  return "#/ws/" + encodeURIComponent(ws) + "/ns/" + encodeURIComponent(ns);
}

// parseRoute reads a fragment: the first page, a namespace's view, or
// what is wrong with it.
function parseRoute(hash) {
  const h = hash.replace(/^#/, "");
  if (h === "" || h === "/") return { view: "home" };
  const m = /^\/ws\/([^/]*)\/ns\/([^/]*)$/.exec(h);
  if (!m) return { view: "missing", why: "This link names no view of the console: it should be #/ or #/ws/<workspace>/ns/<namespace>." };
  let ws, ns;
  try {
    ws = decodeURIComponent(m[1]);
    ns = decodeURIComponent(m[2]);
  } catch (e) {
    return { view: "missing", why: "This link's names are not escaped properly (a % not followed by two hex digits, or not UTF-8)." };
  }
  if (ws === "" || ns === "") return { view: "missing", why: "This link names no " + (ws === "" ? "workspace." : "namespace.") };
  return { view: "namespace", ws, ns };
}

// route shows the view of the current URL.
function route() {
  const r = parseRoute(location.hash);
  state.generation++;
  state.view = r.view;
  $("#home").hidden = r.view !== "home";
  $("#detail").hidden = r.view !== "namespace";
  $("#missing").hidden = r.view !== "missing";
  switch (r.view) {
    case "home":
      document.title = "Namespaces · Sluice console";
      loadNamespaces();
      break;
    case "namespace":
      select(r.ws, r.ns);
      break;
    default:
      showMissing(r.why);
  }
}

// showMissing replaces the view with a message: a link to nothing, or to
// a namespace that does not exist.
function showMissing(msg) {
  state.view = "missing";
  state.generation++;
  $("#home").hidden = true;
  $("#detail").hidden = true;
  $("#missing").hidden = false;
  $("#missing-text").textContent = msg;
  document.title = "Not found · Sluice console";
}

function showError(msg) {
  $("#error").textContent = msg;
  $("#error").hidden = !msg;
}

// loadNamespaces fills the first page: each namespace (of those the
// filter matches) with its passed and denied decisions of the last hour.
async function loadNamespaces() {
  if (state.view !== "home") return;
  const gen = state.generation;
  const filter = $("#filter").value;
  let data;
  try {
    ({ data } = await api("/api/namespaces" + (filter ? "?match=" + encodeURIComponent(filter) : "")));
  } catch (e) {
    if (e.status === 400 && gen === state.generation) { // a filter the server refuses
      $("#namespaces tbody").replaceChildren();
      $("#more").hidden = true;
      $("#empty").hidden = false;
      $("#empty").textContent = e.message;
    }
    return; // else the list keeps its last state; the next poll retries
  }
  if (gen !== state.generation || filter !== $("#filter").value) return; // moved on meanwhile
  const body = $("#namespaces tbody");
  body.replaceChildren();
  for (const k of data.namespaces) {
    const tr = document.createElement("tr");
    tr.dataset.workspace = k.workspace;
    tr.dataset.namespace = k.namespace;
    const cells = [k.namespace, k.workspace, k.passed, k.denied].map((v) => {
      const td = document.createElement("td");
      td.textContent = v;
      return td;
    });
    cells[0].className = "name";
    cells[2].className = "passed";
    cells[3].className = "denied";
    const a = document.createElement("a");
    a.href = namespaceURL(k.workspace, k.namespace);
    a.textContent = k.namespace;
    cells[0].replaceChildren(a);
    tr.append(...cells);
    body.append(tr);
  }
  $("#since").textContent = "passed and denied since " + new Date(data.since).toLocaleTimeString() + " (the last hour)";
  $("#more").hidden = data.more === 0;
  $("#more").textContent = data.more + " more namespace" + (data.more === 1 ? "" : "s") + " not listed (" +
    data.namespaces.length + " of " + data.total + " shown, by workspace and name): filter, or open one by name.";
  const empty = $("#empty");
  empty.hidden = data.total > 0;
  empty.textContent = !data.analytics ? "Analytics are turned off on this server (--analytics=false): open a namespace by name to edit its overrides."
    : filter ? "No namespace matches \u201c" + filter + "\u201d." : "No decision recorded yet.";
}

// select shows workspace ws's namespace ns.
function select(ws, ns) {
  state.ws = ws;
  state.ns = ns;
  document.title = ns + " · Sluice console";
  $("#title").textContent = ns;
  $("#subtitle").textContent = "workspace " + ws;
  showError("");
  $("#totals").textContent = "";
  $("#chart").replaceChildren();
  for (const sel of ["#top-denied tbody", "#top-requests tbody", "#overrides tbody"]) {
    $(sel).replaceChildren();
    delete $(sel).dataset.json;
  }
  refresh();
  loadOverrides();
}

async function refresh() {
  if (state.view !== "namespace") return;
  const gen = state.generation;
  let data;
  try {
    ({ data } = await call("getAnalytics", { namespace: state.ns, interval: state.interval }));
  } catch (e) {
    if (gen !== state.generation) return;
    if (e.type === NOT_FOUND || e.status === 400) {
      showMissing(e.type === NOT_FOUND ? "There is no namespace \u201c" + state.ns + "\u201d in workspace \u201c" + state.ws + "\u201d." : e.message);
    } else {
      showError(e.message);
    }
    return;
  }
  if (gen !== state.generation) return; // another view was opened meanwhile
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
  if (state.view !== "namespace") return;
  const gen = state.generation;
  const body = $("#overrides tbody");
  let res;
  try {
    res = await call("listOverrides", { namespace: state.ns, limit: 100 });
  } catch (e) {
    if (gen !== state.generation) return;
    body.replaceChildren();
    if (e.type !== NOT_FOUND && e.status !== 400) showError(e.message); // refresh tells those
    return;
  }
  if (gen !== state.generation) return;
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
    location.hash = namespaceURL($("#open-workspace").value, $("#open-namespace").value);
  });
  $("#filter-form").addEventListener("submit", (ev) => ev.preventDefault());
  $("#filter").addEventListener("input", () => {
    state.generation++; // an answer for the old filter is stale
    loadNamespaces();
  });
  for (const b of document.querySelectorAll(".interval")) {
    b.addEventListener("click", () => {
      state.interval = b.dataset.interval;
      for (const o of document.querySelectorAll(".interval")) o.classList.toggle("selected", o === b);
      refresh();
    });
  }
  window.addEventListener("hashchange", route);
  route();
  setInterval(refresh, 1000);
  setInterval(loadNamespaces, 5000);
}

init();
