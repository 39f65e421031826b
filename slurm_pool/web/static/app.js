/*
 * slurm-pool console: a single-page app over the REST API under /api/v1.
 *
 * No framework and nothing fetched from elsewhere.  Every value from the
 * service (and so from Slurm or a user) reaches the page through
 * textContent, setAttribute or createElement: never as markup.
 */
"use strict";

(function () {
  const API = "/api/v1";
  // A namespace name, not something fetched: SVG elements must be created in it.
  const SVG_NS = "http://www.w3.org/2000/svg";
  const MIN_REFRESH = 2;
  const UNIT_STATES = ["allocated", "lent", "idle", "drained", "down"];
  const ACTIONS = ["cancel", "hold", "release", "requeue"];
  const MAX_UNITS_DRAWN = 512;
  const ARM_SECONDS = 10;

  const state = {
    me: null,
    csrf: null,
    refresh: 10,
    route: null,
    gen: 0,
    timer: null,
    jobs: null,
    sort: { key: "job_id", dir: -1 },
    errorSource: null,
    armedUntil: 0,
    armTimer: null,
  };

  // -- DOM helpers ----------------------------------------------------------
  function byId(id) {
    return document.getElementById(id);
  }

  function setAttrs(node, attrs) {
    if (!attrs) return node;
    for (const [name, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      node.setAttribute(name, value === true ? "" : String(value));
    }
    return node;
  }

  function append(node, children) {
    if (children === null || children === undefined) return node;
    const list = Array.isArray(children) ? children : [children];
    for (const child of list) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  /** An HTML element with attributes (set with setAttribute) and children (text becomes text nodes). */
  function h(tag, attrs, children) {
    return append(setAttrs(document.createElement(tag), attrs), children);
  }

  /** An SVG element, likewise. */
  function s(tag, attrs, children) {
    return append(setAttrs(document.createElementNS(SVG_NS, tag), attrs), children);
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function setText(id, value) {
    const node = byId(id);
    if (node) node.textContent = value === null || value === undefined ? "" : String(value);
    return node;
  }

  /** Re-render in place, keeping keyboard focus and the scroll position. */
  function keepFocus(render) {
    const active = document.activeElement;
    const key = active && active.getAttribute ? active.getAttribute("data-focus") : null;
    const x = window.scrollX;
    const y = window.scrollY;
    render();
    if (key && !document.body.contains(active)) {
      for (const node of document.querySelectorAll("[data-focus]")) {
        if (node.getAttribute("data-focus") === key) {
          node.focus({ preventScroll: true });
          break;
        }
      }
    }
    if (window.scrollX !== x || window.scrollY !== y) window.scrollTo(x, y);
  }

  // -- formatting -----------------------------------------------------------
  function isNum(v) {
    return typeof v === "number" && Number.isFinite(v);
  }

  function localTime(t) {
    return isNum(t) ? new Date(t * 1000).toLocaleString() : "–";
  }

  function shortTime(t, withSeconds) {
    const parts = { hour: "2-digit", minute: "2-digit" };
    if (withSeconds) parts.second = "2-digit";
    return new Date(t * 1000).toLocaleTimeString([], parts);
  }

  function isoTime(t) {
    return isNum(t) ? new Date(t * 1000).toISOString() : null;
  }

  function duration(seconds) {
    if (!isNum(seconds)) return "–";
    let left = Math.max(0, Math.round(seconds));
    const parts = [];
    for (const [unit, size] of [["d", 86400], ["h", 3600], ["min", 60]]) {
      if (left >= size) {
        parts.push(Math.floor(left / size) + " " + unit);
        left %= size;
      }
    }
    if (left || !parts.length) parts.push(left + " s");
    return parts.slice(0, 2).join(" ");
  }

  function hours(v) {
    return isNum(v) ? v.toFixed(1) : "–";
  }

  function entries(obj) {
    return obj && typeof obj === "object" ? Object.entries(obj) : [];
  }

  function list(v) {
    return Array.isArray(v) ? v : [];
  }

  function pairs(obj) {
    const items = entries(obj).map(([k, v]) => k + ": " + v);
    return items.length ? items.join(", ") : "–";
  }

  // -- talking to the service -----------------------------------------------
  class ApiError extends Error {
    constructor(status, message, field) {
      super(message);
      this.status = status;
      this.field = field;
    }
  }

  // The last answers with an entity tag, by path (the oldest dropped past MAX_KEPT_ANSWERS).
  const MAX_KEPT_ANSWERS = 16;
  const answers = new Map();

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    const init = { method: method, headers: headers, credentials: "same-origin", cache: "no-store" };
    // The session is the cookie *and* this token, on every request: a cookie replayed alone does nothing.
    if (state.csrf) headers["X-CSRF-Token"] = state.csrf;
    // A poll that finds the answer unchanged (the same read of Slurm) gets 304 and reuses the last one.
    const kept = method === "GET" ? answers.get(path) : undefined;
    if (kept) headers["If-None-Match"] = kept.etag;
    if (method !== "GET") {
      headers["Content-Type"] = "application/json";
      if (body !== undefined) init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(API + path, init);
    } catch (err) {
      throw new ApiError(0, "The service cannot be reached (" + err.message + ").", null);
    }
    if (resp.status === 304 && kept) return kept.data;
    let data = null;
    if ((resp.headers.get("Content-Type") || "").indexOf("json") >= 0) {
      try {
        data = await resp.json();
      } catch (err) {
        data = null;
      }
    }
    if (!resp.ok) {
      const message = data && typeof data.message === "string" ? data.message : "HTTP " + resp.status;
      const field = data && typeof data.field === "string" ? data.field : null;
      throw new ApiError(resp.status, message, field);
    }
    const etag = method === "GET" ? resp.headers.get("ETag") : null;
    if (etag) {
      answers.delete(path);
      answers.set(path, { etag: etag, data: data });
      if (answers.size > MAX_KEPT_ANSWERS) answers.delete(answers.keys().next().value);
    }
    return data;
  }

  // -- errors ---------------------------------------------------------------
  function showError(err, source) {
    const box = byId("error");
    const message = err instanceof Error ? err.message : String(err);
    box.textContent = err && err.field ? message + " (field: " + err.field + ")" : message;
    if (err && err.field) box.setAttribute("data-field", err.field);
    else box.removeAttribute("data-field");
    state.errorSource = source;
  }

  function clearError(source) {
    if (source && state.errorSource !== source) return;
    const box = byId("error");
    box.textContent = "";
    box.removeAttribute("data-field");
    state.errorSource = null;
  }

  /** A failed call: back to the login page on 401, else the message in #error. */
  function failed(err, source) {
    if (err && err.status === 401) {
      toLogin("Your session has ended: please sign in again.");
      return;
    }
    showError(err, source);
  }

  // -- who is asking --------------------------------------------------------
  function safeHubUrl(raw) {
    if (typeof raw !== "string" || !raw) return null;
    try {
      const url = new URL(raw, window.location.href);
      return url.protocol === "https:" || url.protocol === "http:" ? url.href : null;
    } catch (err) {
      return null;
    }
  }

  function applyMe(me) {
    state.me = me;
    if (typeof me.csrf_token === "string" && me.csrf_token) keepToken(me.csrf_token);
    setText("whoami", me.user);
    const roles = [];
    if (me.operator) roles.push("operator");
    if (list(me.coordinates).length) roles.push("coordinator of " + list(me.coordinates).join(", "));
    if (list(me.projects).length) roles.push("projects: " + list(me.projects).join(", "));
    setText("whoami-roles", roles.length ? "(" + roles.join("; ") + ")" : "");
    const hub = byId("hub-link");
    const href = safeHubUrl(me.hub_url);
    if (href) {
      hub.setAttribute("href", href);
      hub.hidden = false;
    } else {
      hub.hidden = true;
    }
    fillSelect(byId("f-tier"), list(me.tiers), null);
    const project = byId("f-project");
    const fresh = project.options.length === 0;
    fillSelect(project, list(me.projects), "(default account)");
    if (fresh && list(me.projects).length) project.value = me.projects[0];
    fillSelect(byId("job-tier"), list(me.tiers), null);
    byId("nav").hidden = false;
    byId("who").hidden = false;
    byId("login-view").hidden = true;
  }

  /** Replace a select's options, keeping the chosen value when it is still offered. */
  function fillSelect(select, values, emptyLabel) {
    const chosen = select.value;
    const wanted = (emptyLabel === null ? [] : [""]).concat(values);
    const current = Array.from(select.options).map((o) => o.value);
    if (current.length === wanted.length && current.every((v, i) => v === wanted[i])) return;
    clear(select);
    for (const value of wanted) {
      select.appendChild(h("option", { value: value }, value === "" ? emptyLabel : value));
    }
    if (wanted.indexOf(chosen) >= 0) select.value = chosen;
  }

  /** Remove what the last user saw, so that the next one at this browser does not see it. */
  function forget() {
    for (const id of ["pool-states", "pool-lent", "pool-chart", "nodes-list", "job-fields", "timeline", "explanation", "submit-result", "f-tier", "f-project", "job-tier"]) {
      clear(byId(id));
    }
    for (const id of ["jobs-table", "projects-table", "pool-tiers", "pool-projects", "pool-pending"]) clear(byId(id).tBodies[0]);
    for (const id of ["pool-total", "pool-updated", "nodes-summary", "jobs-count", "jobs-hidden", "job-id", "job-name", "job-state", "job-action-result", "whoami", "whoami-roles"]) {
      setText(id, "");
    }
    byId("submit-result").removeAttribute("data-job-id");
    byId("submit-form").reset();
    byId("jobs-filter").value = "";
    state.route = null;
  }

  // The session's token comes only in the login's answer; it is kept in this origin's session storage
  // (per tab, gone when the tab closes), which no other port or site can read, unlike the cookie.
  const TOKEN_KEY = "slurm-pool-session-token";

  function keepToken(token) {
    state.csrf = token;
    try {
      if (token) window.sessionStorage.setItem(TOKEN_KEY, token);
      else window.sessionStorage.removeItem(TOKEN_KEY);
    } catch (err) {
      // storage turned off: the token lives until the page is left
    }
  }

  function storedToken() {
    try {
      return window.sessionStorage.getItem(TOKEN_KEY);
    } catch (err) {
      return null;
    }
  }

  function toLogin(message) {
    stopPolling();
    forget();
    answers.clear(); // the last user's answers go with them
    state.gen += 1;
    state.me = null;
    keepToken(null);
    state.jobs = null;
    byId("nav").hidden = true;
    byId("who").hidden = true;
    byId("loading").hidden = true;
    for (const section of document.querySelectorAll("section[data-view]")) section.hidden = true;
    clearError();
    byId("login-view").hidden = false;
    setText("login-error", message || "");
    byId("login-user").focus();
  }

  async function login(event) {
    event.preventDefault();
    const button = byId("login-submit");
    const user = byId("login-user").value.trim();
    const password = byId("login-password").value;
    if (!user || !password) {
      setText("login-error", "Enter your user name and password.");
      return;
    }
    button.disabled = true;
    setText("login-error", "");
    try {
      const me = await api("POST", "/login", { user: user, password: password });
      byId("login-password").value = "";
      applyMe(me);
      route(true);
      learnRefresh();
    } catch (err) {
      setText("login-error", err.message);
      byId("login-password").focus();
    } finally {
      button.disabled = false;
    }
  }

  async function logout() {
    try {
      await api("POST", "/logout");
    } catch (err) {
      if (err.status !== 401) {
        showError(err, "action");
        return;
      }
    }
    toLogin("You are signed out.");
  }

  // -- routing and polling --------------------------------------------------
  const SIMPLE_ROUTES = {
    "": "pool",
    "#": "pool",
    "#/": "pool",
    "#/pool": "pool",
    "#/jobs": "jobs",
    "#/history": "history",
    "#/submit": "submit",
    "#/projects": "projects",
    "#/nodes": "nodes",
  };

  /** The route in the hash, or null when the hash is not a route (an in-page anchor). */
  function parseRoute(hash) {
    if (Object.prototype.hasOwnProperty.call(SIMPLE_ROUTES, hash)) return { view: SIMPLE_ROUTES[hash], id: null };
    const job = /^#\/job\/([0-9]{1,12})$/.exec(hash);
    if (job) return { view: "job", id: job[1] };
    if (hash.indexOf("#/") === 0) return { view: "notfound", id: null };
    return null;
  }

  function stopPolling() {
    if (state.timer !== null) clearTimeout(state.timer);
    state.timer = null;
  }

  function schedule() {
    stopPolling();
    const view = VIEWS[state.route ? state.route.view : ""];
    if (!state.me || !view || !view.load) return;
    state.timer = setTimeout(tick, Math.max(MIN_REFRESH, state.refresh) * 1000);
  }

  async function tick() {
    state.timer = null;
    if (!document.hidden) await refresh();
    schedule();
  }

  async function refresh() {
    const gen = state.gen;
    const current = state.route;
    const view = VIEWS[current.view];
    if (!view || !view.load) return;
    try {
      const data = await view.load(current);
      if (gen !== state.gen) return;
      keepFocus(() => view.render(data, current));
      clearError("poll");
    } catch (err) {
      if (gen !== state.gen) return;
      failed(err, "poll");
    }
  }

  function route(moveFocus) {
    const next = parseRoute(window.location.hash);
    if (!next || !state.me) return;
    stopPolling();
    state.gen += 1;
    const changed = !state.route || state.route.view !== next.view || state.route.id !== next.id;
    state.route = next;
    byId("loading").hidden = true;
    if (changed) clearError();
    for (const section of document.querySelectorAll("section[data-view]")) {
      section.hidden = section.getAttribute("data-view") !== next.view;
    }
    for (const link of document.querySelectorAll("#nav a")) {
      const target = parseRoute(link.getAttribute("href") || "");
      if (target && target.view === next.view) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    const view = VIEWS[next.view];
    document.title = view.title(next) + " · slurm-pool";
    if (view.enter) view.enter(next, changed);
    if (moveFocus) {
      const heading = document.querySelector('section[data-view="' + next.view + '"] h1');
      if (heading) heading.focus({ preventScroll: false });
    }
    if (view.load) refresh().then(schedule);
  }

  // -- pool -----------------------------------------------------------------
  /** The pool says how often to poll; pages that do not show it read it once to learn that. */
  function learnRefresh() {
    if (state.route && state.route.view !== "pool" && state.route.view !== "nodes") loadPool().catch(() => null);
  }

  async function loadPool() {
    const pool = await api("GET", "/pool");
    if (pool && isNum(pool.refresh_seconds)) state.refresh = Math.max(MIN_REFRESH, pool.refresh_seconds);
    return pool;
  }

  function fillPairs(table, rows, empty) {
    const body = clear(table.tBodies[0]);
    if (!rows.length) {
      body.appendChild(h("tr", null, h("td", { colspan: 2, class: "muted" }, empty)));
      return;
    }
    for (const [name, value] of rows) {
      body.appendChild(h("tr", null, [h("th", { scope: "row" }, name), h("td", { class: "num" }, value)]));
    }
  }

  function renderPool(pool) {
    setText("pool-total", isNum(pool.total) ? pool.total : "–");
    const updated = byId("pool-updated");
    updated.textContent = "Updated " + localTime(pool.time) + ".";
    if (pool.fresh === false) {
      updated.textContent += " Slurm could not be read just now: these are the last good figures.";
      updated.classList.add("stale");
    } else {
      updated.classList.remove("stale");
    }

    const states = clear(byId("pool-states"));
    const total = isNum(pool.total) && pool.total > 0 ? pool.total : 0;
    for (const [name, count] of entries(pool.states)) {
      const share = total ? Math.round((100 * count) / total) + "%" : "";
      states.appendChild(
        h("li", { "data-state": name }, [
          h("span", { class: "swatch", "aria-hidden": "true" }),
          h("span", { class: "state-name" }, name),
          " ",
          h("strong", { class: "count" }, count),
          share ? h("span", { class: "muted" }, " (" + share + ")") : null,
        ]),
      );
    }
    if (!states.firstChild) states.appendChild(h("li", { class: "muted" }, "No GPU units."));

    fillPairs(byId("pool-tiers"), entries(pool.by_tier), "No GPUs in use.");
    fillPairs(byId("pool-projects"), entries(pool.by_project), "No GPUs in use.");

    const pending = byId("pool-pending");
    const keys = [];
    for (const [, counts] of entries(pool.pending)) {
      for (const key of Object.keys(counts || {})) if (keys.indexOf(key) < 0) keys.push(key);
    }
    const head = clear(pending.tHead.rows[0]);
    head.appendChild(h("th", { scope: "col" }, "Tier"));
    for (const key of keys) head.appendChild(h("th", { scope: "col", class: "num" }, key));
    const body = clear(pending.tBodies[0]);
    for (const [tier, counts] of entries(pool.pending)) {
      const row = h("tr", null, h("th", { scope: "row" }, tier));
      for (const key of keys) row.appendChild(h("td", { class: "num" }, counts && key in counts ? counts[key] : 0));
      body.appendChild(row);
    }
    if (!body.firstChild) body.appendChild(h("tr", null, h("td", { class: "muted" }, "Nothing is waiting.")));

    const lent = clear(byId("pool-lent"));
    for (const name of list(pool.lent_nodes)) {
      lent.appendChild(h("li", null, h("a", { href: "#/nodes", "data-focus": "lent-" + name }, name)));
    }
    if (!lent.firstChild) lent.appendChild(h("li", { class: "muted" }, "No node is lent out."));

    drawChart(byId("pool-chart"), list(pool.history));
  }

  function niceStep(raw) {
    const power = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-9))));
    for (const m of [1, 2, 5, 10]) if (m * power >= raw) return Math.max(1, m * power);
    return Math.max(1, 10 * power);
  }

  /** The utilisation chart, drawn from Pool.history with SVG elements (no markup strings). */
  function drawChart(svg, history) {
    const W = 640;
    const H = 240;
    const m = { l: 44, r: 14, t: 14, b: 34 };
    clear(svg);
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    const points = history.filter((p) => p && isNum(p.time)).sort((a, b) => a.time - b.time);
    const last = points[points.length - 1];
    svg.appendChild(s("title", { id: "pool-chart-title" }, "GPU units over time: total, allocated and lent"));
    svg.appendChild(
      s(
        "desc",
        { id: "pool-chart-desc" },
        last
          ? "At " + localTime(last.time) + ": " + (last.allocated || 0) + " of " + (last.total || 0) +
              " allocated, " + (last.lent || 0) + " lent."
          : "No history yet.",
      ),
    );
    const x0 = m.l;
    const x1 = W - m.r;
    const y0 = H - m.b;
    const y1 = m.t;
    svg.appendChild(s("line", { class: "axis", x1: x0, y1: y0, x2: x1, y2: y0 }));
    svg.appendChild(s("line", { class: "axis", x1: x0, y1: y0, x2: x0, y2: y1 }));
    if (points.length < 2) {
      svg.appendChild(
        s("text", { class: "chart-note", x: (x0 + x1) / 2, y: (y0 + y1) / 2, "text-anchor": "middle" }, "Not enough history yet: it fills in as the service reads the pool."),
      );
      return;
    }
    const t0 = points[0].time;
    const t1 = Math.max(last.time, t0 + 1);
    let top = 1;
    for (const p of points) for (const k of ["total", "allocated", "lent"]) if (isNum(p[k])) top = Math.max(top, p[k]);
    const step = niceStep(top / 4);
    top = Math.ceil(top / step) * step;
    const X = (t) => x0 + ((t - t0) / (t1 - t0)) * (x1 - x0);
    const Y = (v) => y0 - (v / top) * (y0 - y1);
    for (let v = 0; v <= top + 1e-9; v += step) {
      const y = Y(v).toFixed(1);
      if (v > 0) svg.appendChild(s("line", { class: "grid", x1: x0, y1: y, x2: x1, y2: y }));
      svg.appendChild(s("text", { class: "tick", x: x0 - 6, y: y, "text-anchor": "end", "dominant-baseline": "middle" }, String(v)));
    }
    const ticks = 4;
    for (let i = 0; i <= ticks; i += 1) {
      const t = t0 + ((t1 - t0) * i) / ticks;
      const x = X(t).toFixed(1);
      svg.appendChild(s("line", { class: "axis", x1: x, y1: y0, x2: x, y2: y0 + 4 }));
      svg.appendChild(s("text", { class: "tick", x: x, y: y0 + 18, "text-anchor": i === 0 ? "start" : i === ticks ? "end" : "middle" }, shortTime(t, t1 - t0 < 600)));
    }
    svg.appendChild(s("text", { class: "tick", x: 4, y: y1 + 4, "dominant-baseline": "hanging" }, "units"));
    for (const key of ["total", "allocated", "lent"]) {
      const d = points
        .map((p, i) => (i ? "L" : "M") + X(p.time).toFixed(1) + " " + Y(isNum(p[key]) ? p[key] : 0).toFixed(1))
        .join(" ");
      svg.appendChild(s("path", { class: "line line-" + key, d: d, "data-series": key }));
    }
  }

  // -- nodes ----------------------------------------------------------------
  /** One entry per GPU unit: its state, and its type (GPU model, MIG profile or shard) when by_type covers it. */
  function unitsOf(node) {
    const states = [];
    for (const name of UNIT_STATES) {
      const n = isNum(node[name]) ? node[name] : 0;
      for (let i = 0; i < n; i += 1) states.push(name);
    }
    const types = [];
    for (const [type, n] of entries(node.by_type)) for (let i = 0; i < n; i += 1) types.push(type);
    return states.map((st, i) => ({ state: st, type: types.length === states.length ? types[i] : "GPU" }));
  }

  function renderNode(node) {
    const units = unitsOf(node);
    const box = h("article", { class: "node", "data-node": node.name, "data-state": node.state, "aria-labelledby": "node-" + node.name });
    const title = h("h2", { id: "node-" + node.name }, node.name);
    box.appendChild(title);
    const badges = h("p", { class: "node-state" }, [h("span", { class: "badge" }, node.state || "unknown")]);
    if (node.lent_out) badges.appendChild(h("span", { class: "badge lent" }, "lent out"));
    if (node.drain_owner) {
      const who = node.drain_owner === "slurm-pool" ? "slurm-pool (ours)" : node.drain_owner === "human" ? "a human (not ours)" : node.drain_owner;
      badges.appendChild(h("span", { class: "badge drain", "data-drain-owner": node.drain_owner }, "drained by " + who));
    }
    box.appendChild(badges);

    const grid = h("ul", { class: "units", "aria-label": "GPU units of " + node.name });
    units.slice(0, MAX_UNITS_DRAWN).forEach((unit, i) => {
      grid.appendChild(
        h("li", { class: "unit", "data-state": unit.state, "data-type": unit.type, title: unit.type + ": " + unit.state }, [
          h("span", { class: "unit-type" }, unit.type),
          h("span", { class: "unit-state" }, unit.state),
          h("span", { class: "visually-hidden" }, " (unit " + (i + 1) + ")"),
        ]),
      );
    });
    box.appendChild(grid);
    if (units.length > MAX_UNITS_DRAWN) box.appendChild(h("p", { class: "muted" }, "… and " + (units.length - MAX_UNITS_DRAWN) + " more units."));

    const fields = h("dl", { class: "fields" });
    const add = (label, value) => append(fields, [h("dt", null, label), h("dd", null, value)]);
    add("Units", (node.total || 0) + " (" + UNIT_STATES.map((k) => k + " " + (node[k] || 0)).join(", ") + ")");
    add("By type", pairs(node.by_type));
    add("Owners", list(node.owners).length ? list(node.owners).join(", ") : "–");
    add("Used by", pairs(node.used_by));
    if (isNum(node.last_reclaim)) {
      const reclaimed = h("dd", { class: "last-reclaim", "data-time": String(node.last_reclaim) }, localTime(node.last_reclaim));
      append(fields, [h("dt", null, "Last reclaimed from Kubernetes"), reclaimed]);
    }
    if (node.reason) add("Reason", node.reason);
    box.appendChild(fields);
    return box;
  }

  function renderNodes(pool) {
    const nodes = list(pool.nodes);
    const lent = nodes.filter((n) => n.lent_out).length;
    const drained = nodes.filter((n) => n.drain_owner).length;
    const reclaimed = nodes.filter((n) => isNum(n.last_reclaim)).length;
    setText(
      "nodes-summary",
      nodes.length + " nodes, " + lent + " lent out (" + reclaimed + " reclaimed in the last 24 h), " + drained + " drained. Updated " + localTime(pool.time) + ".",
    );
    const box = clear(byId("nodes-list"));
    for (const node of nodes) box.appendChild(renderNode(node));
    if (!nodes.length) box.appendChild(h("p", { class: "muted" }, "No node is visible to you."));
  }

  // -- jobs -----------------------------------------------------------------
  function gpuText(job) {
    const parts = [];
    if (job.gpus) parts.push(String(job.gpus));
    const types = entries(job.gpu_types).map(([k, v]) => k + ":" + v);
    if (types.length) parts.push("(" + types.join(", ") + ")");
    if (job.shards) parts.push("shards " + job.shards);
    return parts.length ? parts.join(" ") : "0";
  }

  const JOB_COLUMNS = [
    { key: "job_id", label: "ID", num: true },
    { key: "name", label: "Name" },
    { key: "user", label: "User" },
    { key: "project", label: "Project" },
    { key: "tier", label: "Tier" },
    { key: "state", label: "State" },
    { key: "reason", label: "Reason" },
    { key: "gpus", label: "GPUs", num: true, text: gpuText },
    { key: "nodes", label: "Nodes" },
    { key: "submit_time", label: "Submitted", num: true, text: (j) => localTime(j.submit_time) },
    { key: "start_time", label: "Started", num: true, text: (j) => localTime(j.start_time) },
    { key: "restart_count", label: "Restarts", num: true },
  ];

  function cellText(job, col) {
    if (col.text) return col.text(job);
    const v = job[col.key];
    return v === null || v === undefined ? "" : String(v);
  }

  function buildJobsHead() {
    const row = clear(byId("jobs-table").tHead.rows[0]);
    for (const col of JOB_COLUMNS) {
      const button = h("button", { type: "button", class: "sort", "data-sort": col.key }, [
        col.label,
        h("span", { class: "sort-mark", "aria-hidden": "true" }),
      ]);
      button.addEventListener("click", () => {
        state.sort = state.sort.key === col.key ? { key: col.key, dir: -state.sort.dir } : { key: col.key, dir: col.num ? -1 : 1 };
        renderJobsTable();
      });
      row.appendChild(h("th", { scope: "col", class: col.num ? "num" : null, "data-key": col.key }, button));
    }
  }

  function compare(a, b, key) {
    const va = a[key];
    const vb = b[key];
    const na = va === null || va === undefined || va === "";
    const nb = vb === null || vb === undefined || vb === "";
    if (na || nb) return na === nb ? 0 : na ? 1 : -1;
    if (typeof va === "number" && typeof vb === "number") return va - vb;
    return String(va).localeCompare(String(vb), undefined, { numeric: true });
  }

  function renderJobs(data) {
    state.jobs = data;
    const select = byId("jobs-state");
    const seen = [];
    for (const job of list(data.jobs)) if (job.state && seen.indexOf(job.state) < 0) seen.push(job.state);
    if (select.value && seen.indexOf(select.value) < 0) seen.push(select.value);
    seen.sort();
    fillSelect(select, seen, "All states");
    renderJobsTable();
    const hidden = entries(data.hidden).filter(([, n]) => n);
    setText("jobs-hidden", hidden.length ? "Jobs of others, as counts only: " + hidden.map(([k, n]) => k + " " + n).join(", ") + "." : "");
  }

  function renderJobsTable() {
    const data = state.jobs;
    if (!data) return;
    keepFocus(() => {
      for (const th of byId("jobs-table").tHead.rows[0].cells) {
        const key = th.getAttribute("data-key");
        const sorted = key === state.sort.key;
        th.setAttribute("aria-sort", sorted ? (state.sort.dir > 0 ? "ascending" : "descending") : "none");
        th.querySelector(".sort-mark").textContent = sorted ? (state.sort.dir > 0 ? " ▲" : " ▼") : "";
      }
      const needle = byId("jobs-filter").value.trim().toLowerCase();
      const wantState = byId("jobs-state").value;
      const all = list(data.jobs);
      const shown = all
        .filter((job) => !wantState || job.state === wantState)
        .map((job) => ({ job: job, cells: JOB_COLUMNS.map((col) => cellText(job, col)) }))
        .filter((row) => !needle || row.cells.some((c) => c.toLowerCase().indexOf(needle) >= 0))
        .sort((a, b) => state.sort.dir * compare(a.job, b.job, state.sort.key) || b.job.job_id - a.job.job_id);
      const body = clear(byId("jobs-table").tBodies[0]);
      for (const row of shown) {
        const tr = h("tr", { "data-job-id": row.job.job_id });
        JOB_COLUMNS.forEach((col, i) => {
          let content = row.cells[i];
          if (col.key === "job_id") {
            content = h("a", { href: "#/job/" + row.job.job_id, "data-focus": "job-" + row.job.job_id }, content);
          }
          const cls = [col.key === "state" ? "state" : null, col.num ? "num" : null].filter(Boolean).join(" ");
          const td = h("td", { class: cls || null }, content);
          if (col.key === "state") td.setAttribute("data-state", row.job.state || "");
          tr.appendChild(td);
        });
        body.appendChild(tr);
      }
      if (!shown.length) {
        body.appendChild(h("tr", null, h("td", { colspan: JOB_COLUMNS.length, class: "muted" }, all.length ? "No job matches the filter." : "You have no jobs to show.")));
      }
      setText("jobs-count", "Showing " + shown.length + " of " + all.length + " jobs.");
    });
  }

  // -- one job ----------------------------------------------------------------
  function disarm() {
    state.armedUntil = 0;
    if (state.armTimer !== null) clearTimeout(state.armTimer);
    state.armTimer = null;
    byId("job-confirm").hidden = true;
    byId("job-cancel").textContent = "Cancel";
    byId("job-cancel").removeAttribute("aria-describedby");
  }

  function enterJob(current, changed) {
    if (!changed) return;
    disarm();
    setText("job-id", current.id);
    setText("job-name", "");
    setText("job-state", "…");
    byId("job-state").removeAttribute("data-state");
    clear(byId("job-fields"));
    clear(byId("timeline"));
    setText("job-restarts", "0");
    setText("job-checkpoint-age", "–");
    setText("job-action-result", "");
    byId("job-action-result").removeAttribute("data-ok");
    renderWhy(null);
  }

  /** The job, and for a pending one why it waits (a failed forecast is said in its section, not as the page's error). */
  async function loadJob(r) {
    const detail = await api("GET", "/jobs/" + r.id);
    if (!isPending(detail.job)) return { detail: detail, why: null };
    try {
      return { detail: detail, why: await api("GET", "/jobs/" + r.id + "/why") };
    } catch (err) {
      if (err.status === 401) throw err;
      if (err.status === 409) return { detail: detail, why: null }; // it started since the job was read
      return { detail: detail, why: { error: err.message || "the forecast failed" } };
    }
  }

  function isPending(job) {
    return Boolean(job) && String(job.state || "").split("+")[0] === "PENDING";
  }

  function renderJobPage(data) {
    renderJob(data.detail);
    renderWhy(data.why);
  }

  /** Job states after which nothing can be done to the job any more. */
  const ENDED = ["COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "DEADLINE", "BOOT_FAIL", "PREEMPTED", "REVOKED", "SPECIAL_EXIT"];
  const WAITING = ["PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"];

  /** The controls a job in this state takes: Slurm refuses the others (hold and tier: waiting jobs only). */
  function actionsFor(job) {
    const words = String(job.state || "").toUpperCase().split(/[+ ,]+/).filter(Boolean);
    const base = words[0] || "";
    if (!base || ENDED.indexOf(base) >= 0 || words.indexOf("COMPLETING") >= 0) return [];
    if (WAITING.indexOf(base) >= 0) {
      const held = /held/i.test(job.reason || "") || words.indexOf("REQUEUE_HOLD") >= 0;
      return held ? ["cancel", "release", "tier"] : ["cancel", "hold", "tier"];
    }
    if (base === "RUNNING" || base === "CONFIGURING") return ["cancel", "requeue"];
    return ["cancel"]; // suspended, stopped, or a state this page does not know
  }

  function applyActions(job) {
    const allowed = actionsFor(job);
    for (const action of ACTIONS) byId("job-" + action).hidden = allowed.indexOf(action) < 0;
    byId("job-tier-form").hidden = allowed.indexOf("tier") < 0;
    byId("job-no-actions").hidden = allowed.length > 0;
    if (allowed.indexOf("cancel") < 0) disarm();
    byId("job-control").setAttribute("data-actions", allowed.join(" "));
  }

  function renderJob(detail) {
    const job = detail.job || {};
    const waiting = isPending(job);
    setText("job-id", job.job_id);
    setText("job-name", job.name ? "“" + job.name + "”" : "");
    setText("job-state", job.state || "unknown");
    byId("job-state").setAttribute("data-state", job.state || "");
    const fields = clear(byId("job-fields"));
    const rows = [
      ["User", job.user],
      ["Project", job.project],
      ["Partition", job.partition],
      ["Tier", job.tier],
      ["Reason", job.reason],
      ["Nodes", job.nodes],
      ["GPUs", gpuText(job)],
      ["Submitted", localTime(job.submit_time)],
      // A waiting job has not started: its start is the forecast's, in "Why is it waiting", not Slurm's guess.
      waiting ? null : ["Started", localTime(job.start_time)],
      waiting ? null : ["Ended", localTime(job.end_time)],
      ["Time limit", duration(job.time_limit_s)],
      ["Output file", detail.output || "–"],
    ].filter(Boolean);
    for (const [label, value] of rows) append(fields, [h("dt", null, label), h("dd", null, value === undefined || value === "" ? "–" : value)]);
    setText("job-restarts", isNum(detail.restarts) ? detail.restarts : job.restart_count || 0);
    setText("job-checkpoint-age", duration(detail.checkpoint_age_s));
    const timeline = clear(byId("timeline"));
    for (const event of list(detail.timeline)) {
      timeline.appendChild(
        h("li", { "data-kind": event.kind }, [
          h("time", { datetime: isoTime(event.time) }, localTime(event.time)),
          " ",
          h("strong", { class: "kind" }, event.kind),
          event.detail ? h("span", { class: "detail" }, " — " + event.detail) : null,
        ]),
      );
    }
    if (!timeline.firstChild) timeline.appendChild(h("li", { class: "muted" }, "No events recorded yet."));
    document.title = "Job " + job.job_id + " · slurm-pool";
    applyActions(job);
  }

  // -- why is it waiting ------------------------------------------------------
  /** The job page's "Why is it waiting" section: made once, before the timeline. */
  function whySection() {
    const found = byId("job-why");
    if (found) return found;
    const section = h("section", { id: "job-why", class: "why", "aria-labelledby": "job-why-heading", hidden: true }, [
      h("h2", { id: "job-why-heading" }, "Why is it waiting"),
      h("div", { id: "job-why-body", "aria-live": "polite" }),
    ]);
    const timeline = byId("timeline").closest("section");
    timeline.parentNode.insertBefore(section, timeline);
    return section;
  }

  /** A predicted moment: local time, and how far from the forecast's own "now". */
  function when(t, now) {
    if (!isNum(t)) return ["none"];
    const away = isNum(now) && t > now ? " (in " + duration(t - now) + ")" : " (now)";
    return [h("time", { datetime: isoTime(t) }, localTime(t)), away];
  }

  function jobLinks(ids) {
    const shown = list(ids).filter((id) => Number.isInteger(id) && id > 0);
    const out = [];
    for (const id of shown) {
      out.push(out.length ? ", " : shown.length > 1 ? " (jobs " : " (job ", h("a", { href: "#/job/" + id }, String(id)));
    }
    if (out.length) out.push(")");
    return out;
  }

  function renderWhy(why) {
    const section = whySection();
    const body = clear(byId("job-why-body"));
    section.hidden = !why;
    if (!why) return;
    if (why.error) {
      body.appendChild(h("p", { class: "muted why-error" }, "The forecast is not available: " + why.error));
      return;
    }
    const start = why.predicted_start;
    const range = list(why.range);
    body.appendChild(
      h("p", { class: "why-start" }, [h("strong", null, "Predicted start: "), ...when(start, why.now), why.note ? " — " + why.note : null]),
    );
    const fields = h("dl", { class: "fields" });
    if (isNum(range[0]) && isNum(range[1]) && range[0] !== range[1]) {
      append(fields, [h("dt", null, "Range"), h("dd", null, [...when(range[0], why.now), " to ", ...when(range[1], why.now)])]);
    }
    append(fields, [h("dt", null, "Slurm's estimate"), h("dd", null, when(why.slurm_estimate, why.now))]);
    append(fields, [h("dt", null, "Reason"), h("dd", null, [why.reason_text || "–", why.reason ? " (" + why.reason + ")" : ""])]);
    append(fields, [h("dt", null, "Runtime assumed"), h("dd", null, duration(why.runtime_seconds) + (why.runtime_basis ? ", from " + why.runtime_basis : ""))]);
    body.appendChild(fields);
    const causes = list(why.causes);
    if (causes.length) {
      body.appendChild(h("h3", null, "It waits for"));
      const ul = h("ul", { class: "why-causes" });
      for (const c of causes) ul.appendChild(h("li", { "data-kind": c.kind }, [c.text, ...jobLinks(c.jobs)]));
      body.appendChild(ul);
    }
    const sooner = list(why.alternatives)
      .filter((a) => isNum(a.predicted_start) && (!isNum(start) || a.predicted_start < start - 1))
      .sort((a, b) => a.predicted_start - b.predicted_start);
    if (sooner.length) {
      body.appendChild(h("h3", null, "It would start sooner with"));
      const ul = h("ul", { class: "why-sooner" });
      for (const a of sooner) ul.appendChild(h("li", null, [a.what + ": ", ...when(a.predicted_start, why.now), " — ", h("code", null, a.how)]));
      body.appendChild(ul);
    } else if (list(why.alternatives).length) {
      body.appendChild(h("p", { class: "muted" }, "No other way to submit it starts it sooner in the pool's model."));
    }
  }

  function showResult(result) {
    const box = byId("job-action-result");
    box.textContent = result.message || result.action + (result.ok ? " done." : " refused.");
    box.setAttribute("data-ok", result.ok ? "true" : "false");
  }

  async function jobAction(action) {
    const current = state.route;
    if (!current || current.view !== "job") return;
    if (action === "cancel" && Date.now() > state.armedUntil) {
      state.armedUntil = Date.now() + ARM_SECONDS * 1000;
      byId("job-confirm").hidden = false;
      byId("job-cancel").textContent = "Click again to cancel";
      byId("job-cancel").setAttribute("aria-describedby", "job-confirm-text");
      state.armTimer = setTimeout(disarm, ARM_SECONDS * 1000);
      return;
    }
    disarm();
    setText("job-action-result", action + "…");
    try {
      const result = await api("POST", "/jobs/" + current.id + "/" + action);
      showResult(result);
      clearError("action");
    } catch (err) {
      setText("job-action-result", "");
      failed(err, "action");
    }
    if (state.route === current) refresh();
  }

  async function changeTier(event) {
    event.preventDefault();
    const current = state.route;
    const tier = byId("job-tier").value;
    if (!current || current.view !== "job" || !tier) return;
    try {
      showResult(await api("POST", "/jobs/" + current.id + "/tier", { tier: tier }));
      clearError("action");
    } catch (err) {
      failed(err, "action");
    }
    if (state.route === current) refresh();
  }

  // -- submit -----------------------------------------------------------------
  const FORM_FIELDS = {
    tier: "f-tier",
    project: "f-project",
    gpus: "f-gpus",
    gpu_type: "f-gpu-type",
    mig: "f-mig",
    shards: "f-shards",
    nodes: "f-nodes",
    time_limit: "f-time",
    name: "f-name",
    script: "f-script",
    checkpoint: "f-checkpoint",
  };

  /** A whole number when the field holds one, else the text itself (the service names the field). */
  function integer(raw) {
    return /^-?[0-9]{1,9}$/.test(raw) ? Number(raw) : raw;
  }

  function readForm() {
    const value = (id) => byId(id).value.trim();
    for (const [key, id] of [["gpus", "f-gpus"], ["shards", "f-shards"]]) {
      // A number field the browser could not read has an empty value: say so rather than send nothing.
      if (byId(id).validity.badInput) throw new ApiError(0, key + ": is not a whole number", key);
    }
    const body = {
      tier: value("f-tier"),
      time_limit: value("f-time"),
      name: byId("f-name").value,
      script: byId("f-script").value.replace(/\r\n/g, "\n"),
      checkpoint: byId("f-checkpoint").checked,
    };
    const optional = { project: "f-project", gpu_type: "f-gpu-type", mig: "f-mig", nodes: "f-nodes" };
    for (const [key, id] of Object.entries(optional)) if (value(id)) body[key] = value(id);
    if (value("f-gpus")) body.gpus = integer(value("f-gpus"));
    if (value("f-shards")) body.shards = integer(value("f-shards"));
    return body;
  }

  function markField(field) {
    for (const id of Object.values(FORM_FIELDS)) byId(id).removeAttribute("aria-invalid");
    if (!field) return;
    const key = field.split(".").pop();
    const id = FORM_FIELDS[key];
    if (id) {
      byId(id).setAttribute("aria-invalid", "true");
      byId(id).focus();
    }
  }

  function renderExplanation(ex) {
    const box = clear(byId("explanation"));
    box.setAttribute("data-ok", ex.ok ? "true" : "false");
    box.appendChild(
      h("p", { class: ex.ok ? "verdict ok" : "verdict refused" }, ex.ok ? "The pool would accept this job." : "The pool would refuse this job."),
    );
    const fields = h("dl", { class: "fields" });
    append(fields, [h("dt", null, "Tier"), h("dd", null, ex.tier || "–")]);
    append(fields, [h("dt", null, "Partition"), h("dd", { id: "explanation-partition" }, ex.partition || "–")]);
    append(fields, [h("dt", null, "QOS"), h("dd", { id: "explanation-qos" }, ex.qos || "–")]);
    if (ex.output) append(fields, [h("dt", null, "Output file"), h("dd", { id: "explanation-output" }, ex.output)]);
    box.appendChild(fields);
    const section = (title, items, cls, wrap) => {
      if (!items.length) return;
      box.appendChild(h("h3", null, title));
      const ul = h("ul", { class: cls });
      for (const item of items) ul.appendChild(h("li", null, wrap ? h("code", null, item) : item));
      box.appendChild(ul);
    };
    section("sbatch options", list(ex.options), "options", true);
    section("Notes", list(ex.notes), "notes", false);
    section("Why it would be refused", list(ex.refusals), "refusals", false);
  }

  async function explain() {
    markField(null);
    try {
      const body = readForm();
      renderExplanation(await api("POST", "/jobs/explain", body));
      clearError("submit");
    } catch (err) {
      failed(err, "submit");
      markField(err.field);
    }
  }

  async function submit(event) {
    event.preventDefault();
    markField(null);
    const button = byId("f-submit");
    const result = clear(byId("submit-result"));
    result.removeAttribute("data-job-id");
    button.disabled = true;
    try {
      const body = readForm();
      const done = await api("POST", "/jobs", body);
      clearError("submit");
      if (done.explanation) renderExplanation(done.explanation);
      result.setAttribute("data-job-id", String(done.job_id));
      append(result, [
        "Submitted job " + done.job_id + ". ",
        h("a", { href: "#/job/" + done.job_id, id: "submit-job-link" }, "Follow job " + done.job_id),
      ]);
      const output = done.explanation && done.explanation.output;
      if (output) {
        const path = output.replace(/%j|%A/g, String(done.job_id)).replace(/%u/g, state.me ? state.me.user : "%u");
        append(result, [". Its output goes to ", h("code", { id: "submit-output" }, path), "."]);
      }
    } catch (err) {
      failed(err, "submit");
      markField(err.field);
    } finally {
      button.disabled = false;
    }
  }

  // -- history ----------------------------------------------------------------
  const HISTORY_COLUMNS = [
    ["ID", (j) => h("a", { href: "#/job/" + j.job_id }, String(j.job_id))],
    ["Name", (j) => j.name || ""],
    ["State", (j) => j.state || ""],
    ["Project", (j) => j.project || ""],
    ["Tier", (j) => j.tier || ""],
    ["GPUs", gpuText],
    ["Started", (j) => localTime(j.start_time)],
    ["Ended", (j) => localTime(j.end_time)],
    ["Ran", (j) => (isNum(j.start_time) && isNum(j.end_time) ? duration(j.end_time - j.start_time) : "–")],
  ];

  function renderHistory(data) {
    const head = clear(byId("history-table").tHead.rows[0]);
    for (const [label] of HISTORY_COLUMNS) head.appendChild(h("th", { scope: "col" }, label));
    const body = clear(byId("history-table").tBodies[0]);
    for (const job of list(data.jobs)) {
      const tr = h("tr", { "data-job-id": job.job_id });
      for (const [label, cell] of HISTORY_COLUMNS) {
        const td = h("td", null, cell(job));
        if (label === "State") td.setAttribute("data-state", job.state || "");
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    if (!body.firstChild) body.appendChild(h("tr", null, h("td", { colspan: HISTORY_COLUMNS.length, class: "muted" }, "No job of yours ended in the last two weeks.")));
    const hidden = entries(data.hidden).filter(([, n]) => n);
    setText("history-hidden", hidden.length ? "Jobs of others, as counts only: " + hidden.map(([k, n]) => k + " " + n).join(", ") + "." : "");
  }

  // -- projects ---------------------------------------------------------------
  function renderProjects(projects) {
    const body = clear(byId("projects-table").tBodies[0]);
    for (const p of list(projects)) {
      const charges = entries(p.charges).map(([tier, v]) => tier + ": " + hours(v));
      body.appendChild(
        h("tr", { "data-project": p.name }, [
          h("th", { scope: "row" }, p.name),
          h("td", { class: "num" }, p.hours),
          h("td", { class: "num" }, hours(p.guaranteed_gpu_hours)),
          h("td", { class: "num" }, hours(p.borrowed_gpu_hours)),
          h("td", { class: "num" }, hours(p.lent_gpu_hours)),
          h("td", null, charges.length ? charges.join(", ") : "–"),
          h("td", null, list(p.owns).length ? list(p.owns).join(", ") : "–"),
        ]),
      );
    }
    if (!body.firstChild) body.appendChild(h("tr", null, h("td", { colspan: 7, class: "muted" }, "You are in no project.")));
  }

  // -- the views --------------------------------------------------------------
  const VIEWS = {
    pool: { title: () => "Pool", load: loadPool, render: renderPool },
    nodes: { title: () => "Nodes", load: loadPool, render: renderNodes },
    jobs: { title: () => "Jobs", load: () => api("GET", "/jobs"), render: renderJobs },
    history: { title: () => "History", load: () => api("GET", "/jobs/history"), render: renderHistory },
    job: {
      title: (r) => "Job " + r.id,
      enter: enterJob,
      load: loadJob,
      render: renderJobPage,
    },
    projects: { title: () => "Projects", load: () => api("GET", "/projects"), render: renderProjects },
    submit: { title: () => "Submit", enter: () => (state.me ? applyMe(state.me) : null) },
    notfound: { title: () => "Not found" },
  };

  // -- start ------------------------------------------------------------------
  function wire() {
    byId("login-form").addEventListener("submit", login);
    byId("logout").addEventListener("click", logout);
    byId("skip-link").addEventListener("click", (event) => {
      event.preventDefault();
      byId("main").focus();
    });
    byId("jobs-tools").addEventListener("submit", (event) => event.preventDefault());
    byId("jobs-filter").addEventListener("input", renderJobsTable);
    byId("jobs-state").addEventListener("change", renderJobsTable);
    for (const action of ACTIONS) byId("job-" + action).addEventListener("click", () => jobAction(action));
    byId("job-cancel-confirm").addEventListener("click", () => {
      state.armedUntil = Date.now() + 1000;
      jobAction("cancel");
    });
    byId("job-cancel-abort").addEventListener("click", () => {
      disarm();
      byId("job-cancel").focus();
    });
    byId("job-tier-form").addEventListener("submit", changeTier);
    byId("f-explain").addEventListener("click", explain);
    byId("submit-form").addEventListener("submit", submit);
    window.addEventListener("hashchange", () => route(true));
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && state.me && state.route) refresh();
    });
    buildJobsHead();
  }

  /** Who is asking: the console, or the login page on 401; tried again while the service is unreachable. */
  async function boot() {
    try {
      applyMe(await api("GET", "/me"));
    } catch (err) {
      if (err.status === 401) {
        toLogin("");
      } else {
        byId("loading").hidden = true;
        showError(err, "start");
        setTimeout(boot, 5000);
      }
      return;
    }
    clearError("start");
    if (!parseRoute(window.location.hash)) window.history.replaceState(null, "", "#/pool");
    route(false);
    learnRefresh();
  }

  function start() {
    wire();
    state.csrf = storedToken();
    boot();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
