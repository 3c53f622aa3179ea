"use strict";
// amber's dashboard: plain DOM, no build step. Every change is sent with the page's token
// in X-Amber-Token; data is only ever put in the page as text, never as markup.

const TOKEN = document.querySelector('meta[name="amber-token"]').content;
const POLL_MS = 2000;
const view = document.getElementById("view");
let state = {page: 0, status: ""};
let timer = null;
let busy = false;

// -- helpers ------------------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path, options = {}) {
  const init = {credentials: "same-origin", headers: {}, ...options};
  if (init.method && init.method !== "GET") {
    init.headers["X-Amber-Token"] = TOKEN;
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body || {});
  }
  const response = await fetch("/api" + path, init);
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) throw new Error((data && data.error) || response.statusText);
  return data;
}

function toast(message, bad) {
  const el = document.getElementById("toast");
  el.textContent = message;
  el.className = bad ? "show bad" : "show";
  clearTimeout(el._t);
  el._t = setTimeout(() => { el.className = ""; }, 5000);
}

function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

function when(iso) {
  return iso ? h("time", {datetime: iso, title: iso}, `${new Date(iso).toLocaleString()} (${ago(iso)})`) : "";
}

function short(id) { return id ? id.slice(0, 8) : ""; }

function badge(status, queued) {
  const label = queued ? "queued" : status;
  return h("span", {class: `badge ${queued ? "queued" : status}`}, label);
}

function bar(done, total) {
  const pct = total ? Math.round((100 * done) / total) : 0;
  const fill = h("div", {class: "fill"});
  fill.style.width = `${pct}%`; // CSSOM, which the page's CSP allows (inline styles it does not)
  return h("div", {class: "bar", role: "progressbar", "aria-valuenow": pct, "aria-valuemin": 0, "aria-valuemax": 100},
    fill, h("span", {}, `${done} of ${total}`));
}

function json(value) {
  return h("pre", {class: "json"}, JSON.stringify(value, null, 2));
}

// A confirmation dialog; resolves to the typed value (or "" with no field), null on cancel.
function confirmAction(title, text, field, initial) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  const wrap = document.getElementById("confirm-field");
  const input = document.getElementById("confirm-input");
  wrap.hidden = !field;
  document.getElementById("confirm-label").textContent = field || "";
  input.value = initial || "";
  busy = true;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      busy = false;
      resolve(dialog.returnValue === "ok" ? input.value : null);
    }, {once: true});
    dialog.returnValue = "";
    dialog.showModal();
    if (field) input.focus();
  });
}

async function act(label, title, text, call, field, initial) {
  const value = await confirmAction(title, text, field, initial);
  if (value === null) return;
  try {
    const result = await call(value);
    toast((result && result.message) || `${label}: done`);
  } catch (e) {
    toast(`${label}: ${e.message}`, true);
  }
  refresh();
}

function button(label, onclick, cls) {
  return h("button", {type: "button", class: cls || "", onclick}, label);
}

// -- views ---------------------------------------------------------------------------------
async function analysesView() {
  const q = new URLSearchParams({limit: 20, offset: state.page * 20});
  if (state.status) q.set("status", state.status);
  const [page, app] = await Promise.all([api(`/analyses?${q}`), api("/app")]);
  const filter = h("select", {id: "status-filter", onchange: (e) => { state.status = e.target.value; state.page = 0; refresh(); }},
    ["", "running", "paused", "completed", "failed", "expired"].map((s) =>
      h("option", {value: s, selected: s === state.status}, s || "every status")));
  const rows = page.items.map((a) => h("tr", {"data-analysis": a.analysis_id},
    h("td", {}, h("a", {href: `#/analysis/${a.analysis_id}`}, short(a.analysis_id))),
    h("td", {}, a.definition || "-", a.ticker ? ` · ${a.ticker}` : ""),
    h("td", {}, badge(a.status, a.queued)),
    h("td", {}, a.agents.map((g) => h("div", {class: "agent-line"}, h("span", {class: "agent-name"}, g.agent_type), bar(g.done, g.total)))),
    h("td", {}, a.pause ? [h("strong", {class: "reason"}, a.pause.says), h("div", {class: "muted"}, `since ${ago(a.pause.since)}`)] : ""),
    h("td", {class: "mono"}, a.owner || (a.queued ? (a.unserved && a.unserved.length ? a.state : "waiting for a worker") : "")),
    h("td", {}, ago(a.updated_at))));
  return [
    h("section", {class: "toolbar"}, h("h1", {}, "Analyses"), filter, h("span", {class: "spacer"}), submitForm(app)),
    h("table", {id: "analyses"}, h("thead", {}, h("tr", {}, ["analysis", "what", "status", "progress", "paused", "run held by", "updated"].map((c) => h("th", {}, c)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", {colspan: 7, class: "muted"}, "No analyses.")))),
    h("nav", {class: "pager"},
      button("← newer", () => { state.page -= 1; refresh(); }, state.page ? "secondary" : "secondary hidden"),
      h("span", {class: "muted"}, `page ${state.page + 1}`),
      button("older →", () => { state.page += 1; refresh(); }, page.more ? "secondary" : "secondary hidden")),
  ];
}

// Built once and moved between renders, so what is typed in it survives each refresh.
let submitNode = null;
function submitForm(app) {
  if (submitNode) return submitNode;
  const defs = Object.keys(app.definitions);
  submitNode = h("form", {id: "submit-form", class: "inline", onsubmit: async (e) => {
    e.preventDefault();
    const f = e.target;
    let input = null;
    try { input = f.input.value.trim() ? JSON.parse(f.input.value) : null; }
    catch (err) { toast(`input is not JSON: ${err.message}`, true); return; }
    try {
      const r = await api("/analyses", {method: "POST", body: {definition: f.definition.value, ticker: f.ticker.value || null, input}});
      toast(`submitted ${short(r.analysis_id)}`);
      location.hash = `#/analysis/${r.analysis_id}`;
    } catch (err) { toast(`submit: ${err.message}`, true); }
  }},
  h("select", {name: "definition", "aria-label": "definition"}, defs.map((d) => h("option", {value: d}, d))),
  h("input", {name: "ticker", placeholder: "ticker", size: 8, "aria-label": "ticker"}),
  h("input", {name: "input", placeholder: "input (JSON object)", size: 24, "aria-label": "input"}),
  h("button", {type: "submit"}, "Submit"));
  return submitNode;
}

function analysisActions(a) {
  const id = a.analysis_id;
  const out = [];
  if (a.status === "running") {
    out.push(button("Pause", () => act("pause", "Pause this analysis?", "Its run stops at the next step boundary; every agent is checkpointed.",
      (reason) => api(`/analyses/${id}/pause`, {method: "POST", body: {reason: reason || "manual"}}), "Reason", "manual")));
  }
  const reviewing = a.pause && a.pause.reviews && a.pause.reviews.length;
  if (a.status === "paused" && reviewing) {  // a decision continues it, not a resume
    for (const r of a.pause.reviews) {
      for (const [verb, label] of [["approve", "Approve"], ["reject", "Reject"]]) {
        out.push(button(`${label} ${r.kind}`, () => act(verb, `${label} review ${r.kind}?`,
          "The decision is recorded once and the analysis is queued again.",
          (comment) => api(`/reviews/${encodeURIComponent(r.ref)}/${verb}`, {method: "POST", body: {comment: comment || null}}), "Comment (optional)"),
          verb === "reject" ? "danger" : undefined));
      }
    }
  } else if (a.status === "paused") {
    out.push(button("Resume", () => act("resume", "Resume this analysis?", "Every agent's working memory is recovered now; a worker then continues it.",
      () => api(`/analyses/${id}/resume`, {method: "POST"}))));
  }
  if (a.status === "failed") {
    out.push(button("Retry", () => act("retry", "Retry this analysis?", "It continues from its last checkpoints when a worker picks it up.",
      () => api(`/analyses/${id}/retry`, {method: "POST"}))));
  }
  return out;
}

function reviewCard(r) {
  const task = r.analysis_id === null;
  const what = task ? `task ${r.task_id}` : `the analysis ${short(r.analysis_id)}`;
  const queued = task ? "The decision is recorded once." : `The decision is recorded once and ${what} is queued again.`;
  const decide = (verb, outcome) => () => act(verb, `${outcome} review ${r.kind || r.ref}?`, queued,
    (comment) => api(`/reviews/${encodeURIComponent(r.ref)}/${verb}`, {method: "POST", body: {comment: comment || null}}), "Comment (optional)");
  const from = task
    ? [h("span", {class: "muted"}, `task ${r.task_id} · confidence ${Number(r.confidence).toFixed(2)} · ${r.scope}`),
       r.deadline ? h("span", {class: "muted"}, ` · expires ${new Date(r.deadline).toLocaleString()}`) : ""]
    : [h("span", {class: "muted"}, `${r.agent_type} · step ${r.step} · analysis `),
       h("a", {href: `#/analysis/${r.analysis_id}`}, short(r.analysis_id)),
       r.deadline ? h("span", {class: "muted"}, ` · deadline ${new Date(r.deadline).toLocaleString()} (${r.on_deadline})`) : ""];
  return h("div", {class: "card review", "data-review": r.ref},
    h("div", {class: "row"}, h("strong", {}, r.kind || r.ref), badge(r.status), ...from),
    json(r.payload),
    r.status === "pending" ? h("div", {class: "row"}, button("Approve", decide("approve", "Approve")), button("Reject", decide("reject", "Reject"), "danger")) :
      h("p", {class: "muted"}, `decided by ${r.decision ? r.decision.by : "?"}`));
}

function doubtRow(i) {
  const resolve = (action) => () => act(action, action === "rerun" ? "Run this step again?" : "Skip this step?",
    action === "rerun" ? `Step ${i.step_key} (${i.fn}) runs again when the analysis resumes; it may have taken effect already.`
      : `Step ${i.step_key} is not run again; the JSON below is recorded as its result.`,
    (value) => {
      let result = null;
      if (action === "skip" && value.trim()) result = JSON.parse(value);
      return api(`/steps/${i.step_id}/resolve`, {method: "POST", body: {action, result}});
    }, action === "skip" ? "Result (JSON)" : null, action === "skip" ? "null" : "");
  return h("tr", {"data-step": i.step_id},
    h("td", {}, h("a", {href: `#/analysis/${i.analysis_id}`}, short(i.analysis_id))),
    h("td", {}, i.agent_type), h("td", {class: "mono"}, i.step_key), h("td", {class: "mono"}, i.fn),
    h("td", {}, ago(i.started_at)),
    h("td", {}, button("Rerun", resolve("rerun")), " ", button("Skip", resolve("skip"), "secondary")));
}

function doubtTable(rows) {
  return h("table", {class: "doubt"}, h("thead", {}, h("tr", {}, ["analysis", "agent", "step", "function", "started", ""].map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.length ? rows.map(doubtRow) : h("tr", {}, h("td", {colspan: 6, class: "muted"}, "No step is in doubt."))));
}

function recoveryTable(p) {
  if (!p.recoveries.length) return h("p", {class: "muted"}, p.resumed_at ? "resumed by a review decision or a takeover: no memory report" : "not resumed yet");
  return h("table", {class: "recoveries"}, h("thead", {}, h("tr", {}, ["agent", "recovered from", "keys", "ms", "verified", "why not L1"].map((c) => h("th", {}, c)))),
    h("tbody", {}, p.recoveries.map((r) => h("tr", {},
      h("td", {}, r.agent_type), h("td", {}, h("span", {class: `tier ${r.path}`}, r.path)), h("td", {}, r.keys),
      h("td", {}, r.ms === null ? "" : Number(r.ms).toFixed(1)),
      h("td", {class: r.verified ? "ok" : "warn"}, r.verified ? "✓ verified" : "✗ not verified"),
      h("td", {class: "muted"}, r.reason || "")))));
}

async function analysisView(id) {
  const a = await api(`/analyses/${id}`);
  const agents = a.agents.map((g) => h("section", {class: "card agent", "data-agent": g.agent_type},
    h("div", {class: "row"}, h("h3", {}, g.agent_type), h("span", {class: "muted mono"}, g.agent_id), h("span", {class: "spacer"}), h("span", {class: "muted"}, g.status)),
    bar(g.done, g.total),
    h("div", {class: "steps"}, g.steps.length ? g.steps.map((s) => h("span", {class: "step"}, s)) : h("span", {class: "muted"}, "no step recorded yet")),
    g.checkpoints.length ? h("ol", {class: "timeline"}, g.checkpoints.map((c) => h("li", {},
      h("strong", {}, `#${c.seq}`), ` ${c.done} of ${c.total}`, c.current_subtask ? ` · next ${c.current_subtask}` : " · done",
      c.failure_reason ? h("span", {class: "warn"}, ` · ${c.failure_reason}`) : "",
      c.snapshot_in_postgresql ? h("span", {class: "muted"}, " · memory in PostgreSQL") : "",
      h("span", {class: "muted"}, ` · ${ago(c.at)}`)))) :
      h("p", {class: "muted"}, a.status === "completed" ? "checkpoints purged at completion" : "no checkpoint yet"),
    g.result !== null ? h("details", {}, h("summary", {}, "result"), json(g.result)) : ""));
  const pauses = a.pauses.map((p, n) => h("section", {class: "card pause"},
    h("div", {class: "row"}, h("strong", {}, `pause ${n + 1}: ${p.reason}`), h("span", {class: "muted"}, ` by ${p.paused_by} · `), when(p.paused_at),
      p.resumed_at ? h("span", {class: "muted"}, ` · resumed by ${p.resumed_by} `) : h("span", {class: "badge paused"}, "open"), p.resumed_at ? when(p.resumed_at) : ""),
    p.error ? h("p", {class: "warn"}, p.error) : "",
    recoveryTable(p)));
  const events = a.timeline.map((e) => h("li", {}, h("span", {class: "muted"}, new Date(e.at).toLocaleTimeString()), " ", h("strong", {}, e.kind), e.by ? ` by ${e.by}` : "",
    e.detail ? h("span", {class: "muted mono"}, ` ${JSON.stringify(e.detail)}`) : ""));
  return [
    h("section", {class: "toolbar"}, h("h1", {}, `Analysis ${short(a.analysis_id)}`), badge(a.status, a.queued),
      a.pause ? h("span", {class: "reason"}, `${a.pause.says} · since ${ago(a.pause.since)}`) : "",
      a.owner ? h("span", {class: "muted mono"}, `run held by ${a.owner}`) : "",
      a.unserved && a.unserved.length ? h("span", {class: "reason"}, a.state) : "",
      h("span", {class: "spacer"}), analysisActions(a)),
    h("p", {class: "muted mono"}, `${a.analysis_id} · ${a.definition || "-"}${a.ticker ? " · " + a.ticker : ""}`),
    a.reviews.length ? [h("h2", {}, "Reviews"), a.reviews.map(reviewCard)] : "",
    a.in_doubt.length ? [h("h2", {}, "Steps in doubt"), doubtTable(a.in_doubt)] : "",
    h("h2", {}, "Agents"), h("div", {class: "agents"}, agents),
    h("h2", {}, "Pauses and recoveries"), pauses.length ? pauses : h("p", {class: "muted"}, "Never paused."),
    h("h2", {}, "Timeline"), h("ol", {class: "events"}, events),
  ];
}

async function reviewsView() {
  const rows = await api("/reviews?status=pending");
  return [h("h1", {}, "Review queue"), rows.length ? rows.map(reviewCard) : h("p", {class: "muted"}, "No review is waiting.")];
}

async function stepsView() {
  return [h("h1", {}, "Steps in doubt"),
    h("p", {class: "muted"}, "At-most-once steps that started and never recorded a result: their run died. Decide each once."),
    doubtTable(await api("/steps/in-doubt"))];
}

async function sessionsView() {
  let sessions;
  try { sessions = await api("/sessions"); } catch (e) { return [h("h1", {}, "Sessions"), h("p", {class: "muted"}, e.message)]; }
  return [h("h1", {}, "Sessions"),
    h("table", {}, h("thead", {}, h("tr", {}, ["session", "status", "version", "planned tasks", "goal"].map((c) => h("th", {}, c)))),
      h("tbody", {}, sessions.length ? sessions.map((s) => h("tr", {}, h("td", {class: "mono"}, s.session_id), h("td", {}, s.status), h("td", {}, s.version),
        h("td", {}, (s.task_queue || []).length), h("td", {}, s.goal))) : h("tr", {}, h("td", {colspan: 5, class: "muted"}, "No live session."))))];
}

// -- the loop ------------------------------------------------------------------------------
function route() {
  const hash = location.hash || "#/";
  const m = hash.match(/^#\/analysis\/([0-9a-f-]{36})$/);
  if (m) return ["analyses", () => analysisView(m[1])];
  if (hash === "#/reviews") return ["reviews", reviewsView];
  if (hash === "#/steps") return ["steps", stepsView];
  if (hash === "#/sessions") return ["sessions", sessionsView];
  return ["analyses", analysesView];
}

async function counts() {
  const [reviews, doubt] = await Promise.all([api("/reviews?status=pending"), api("/steps/in-doubt")]);
  document.getElementById("review-count").textContent = reviews.length || "";
  document.getElementById("doubt-count").textContent = doubt.length || "";
}

async function refresh() {
  clearTimeout(timer);
  if (!busy) {
    const [nav, render] = route();
    for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === nav);
    const live = document.getElementById("live");
    try {
      const nodes = await render();
      const open = new Set([...view.querySelectorAll("details[open]")].map((d) => d.closest("[data-agent]")?.dataset.agent));
      view.replaceChildren(...[nodes].flat(3).filter(Boolean));
      for (const d of view.querySelectorAll("[data-agent] details")) if (open.has(d.closest("[data-agent]").dataset.agent)) d.open = true;
      await counts();
      live.className = "live";
    } catch (e) {
      live.className = "live down";
      live.title = e.message;
    }
  }
  timer = setTimeout(refresh, POLL_MS);
}

window.addEventListener("hashchange", () => { state.page = 0; refresh(); });
refresh();
