// The Training page and the run page of potato-server: they poll the
// JSON API under /admin/training/api with the session's cookie and send
// the session's CSRF token with every request that changes something.
// Every value from the API reaches the page as text (textContent), never
// as markup.
"use strict";

(function () {
  const API = "/admin/training/api";
  const body = document.body;
  const csrf = body.dataset.csrf;
  const pollMS = Number(body.dataset.pollMs) || 2000;
  const idlePollMS = Number(body.dataset.idlePollMs) || 10000;
  const backendsPollMS = 30000;
  // The Runs table shows the newest runs only.
  const tableRows = 50;
  const FINISHED = ["success", "error", "cancelled"];

  const $ = (id) => document.getElementById(id);

  // api sends one request and returns its JSON; a refusal throws the
  // API's own error text, with its hints.
  async function api(method, path, payload) {
    return (await request(method, path, payload)).data;
  }

  // request is api with the answer's headers.
  async function request(method, path, payload) {
    const init = { method, credentials: "same-origin", headers: { "X-CSRF-Token": csrf } };
    if (payload !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    let resp;
    try {
      resp = await fetch(API + path, init);
    } catch (e) {
      throw new Error("the server did not answer (" + e.message + ")");
    }
    const text = await resp.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (e) {
      // not JSON: reported below with the status
    }
    if (resp.status === 401) {
      throw new Error("Signed out: " + ((data && data.error) || "the session has ended") + ". Sign in again at /admin/training/login.");
    }
    if (!resp.ok) {
      let msg = (data && data.error) || (resp.status + " " + resp.statusText + (text ? ": " + text.slice(0, 300) : ""));
      if (data && data.hints) msg += " (" + data.hints.join("; ") + ")";
      throw new Error(msg);
    }
    if (data === null) throw new Error(method + " " + path + ": the answer is not JSON");
    return { data, headers: resp.headers };
  }

  // fitTrainers offers only the trainers that learn every ticked schema's
  // kind (the registry's kinds, on each option), and says so when none
  // does; a selected trainer that no longer fits gives way to the first
  // that does.
  function fitTrainers() {
    const kinds = Array.from(document.querySelectorAll("input[name=schemas]:checked")).map((i) => i.dataset.kind);
    const sel = $("trainer");
    let first = null;
    for (const o of sel.options) {
      const learns = (o.dataset.kinds || "").split(" ");
      const fits = kinds.every((k) => learns.includes(k));
      o.disabled = o.hidden = !fits;
      if (fits && first === null) first = o;
    }
    if (sel.selectedOptions.length === 0 || sel.selectedOptions[0].disabled) {
      if (first !== null) sel.value = first.value;
    }
    const note = $("trainer-note");
    const none = Array.from(new Set(kinds)).filter((k) =>
      !Array.from(sel.options).some((o) => (o.dataset.kinds || "").split(" ").includes(k)));
    note.hidden = first !== null;
    if (first !== null) note.textContent = "";
    else if (none.length > 0) note.textContent = "No trainer of this version learns " + none.join(" or ") +
      " schemas: untick them, or train them with an exec: program of your own (potato-dispatch run --trainer exec:PROGRAM).";
    else note.textContent = "No one trainer learns the ticked schemas together: start a run for each kind.";
    $("start-run").disabled = first === null;
  }

  function showError(e) {
    const el = $("error");
    el.textContent = e ? String(e.message || e) : "";
    el.hidden = !e;
  }

  function el(tag, text, cls) {
    const n = document.createElement(tag);
    if (text !== undefined && text !== null) n.textContent = String(text);
    if (cls) n.className = cls;
    return n;
  }

  const finished = (r) => FINISHED.includes(r.state);

  // ---- Charts: hand-made SVG, every text through textContent and every
  // value of the API through setAttribute, never markup. ----

  const SVG = "http://www.w3.org/2000/svg";

  function svg(tag, attrs, text) {
    const n = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, String(v));
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }

  // num writes a figure with three significant digits.
  function num(v) {
    if (!Number.isFinite(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 0.001 || a >= 1e6)) return v.toExponential(2);
    return String(Number(v.toPrecision(3)));
  }

  // ticks are about n round values spanning [lo, hi], which they widen
  // to the ticks at either end.
  function ticks(lo, hi, n) {
    if (hi <= lo) {
      const pad = Math.abs(lo) > 0 ? Math.abs(lo) * 0.1 : 1;
      lo -= pad;
      hi += pad;
    }
    const raw = (hi - lo) / n;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => (hi - lo) / s <= n) || 10 * mag;
    const first = Math.floor(lo / step + 1e-9) * step;
    const out = [];
    for (let v = first; v < hi + step - 1e-9 * step; v += step) out.push(Number(v.toPrecision(12)));
    return out;
  }

  // A score bounded by 0 and 1 is drawn on [0, 1], so that its changes
  // look their true size; anything else from 0 (or its least value,
  // when negative) to its greatest.
  const BOUNDED = /(^|[/_.-])(accuracy|acc|f1|macro_f1|micro_f1|precision|recall|coverage)$/i;

  // lineChart is a figure of one or more series on shared axes: each
  // series {label, points: [[x, y], ...], data: {attribute: value}} is a
  // polyline whose points are the series' own, in the order of x.
  function lineChart(title, xLabel, series, bounded) {
    const W = 460, H = 230, L = 56, R = 14, T = 14, B = 42;
    const xs = series.flatMap((s) => s.points.map((p) => p[0]));
    const ys = series.flatMap((s) => s.points.map((p) => p[1]));
    let xlo = Math.min(...xs), xhi = Math.max(...xs);
    if (xlo === xhi) {
      xlo -= 1;
      xhi += 1;
    }
    const yt = bounded ? [0, 0.2, 0.4, 0.6, 0.8, 1] : ticks(Math.min(0, ...ys), Math.max(...ys), 5);
    const ylo = yt[0], yhi = yt[yt.length - 1];
    const px = (x) => L + ((x - xlo) / (xhi - xlo)) * (W - L - R);
    const py = (y) => T + ((yhi - y) / (yhi - ylo)) * (H - T - B);
    const fig = el("figure", null, "chart");
    const g = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": title });
    g.appendChild(svg("title", {}, title));
    for (const v of yt) {
      g.appendChild(svg("line", { x1: L, x2: W - R, y1: py(v), y2: py(v), class: "grid" }));
      g.appendChild(svg("text", { x: L - 6, y: py(v) + 4, class: "tick", "text-anchor": "end" }, num(v)));
    }
    // Steps and shares counted in whole numbers get whole ticks.
    const whole = xs.every(Number.isInteger);
    for (const v of ticks(xlo, xhi, 6).filter((v) => v >= xlo && v <= xhi && (!whole || Number.isInteger(v)))) {
      g.appendChild(svg("line", { x1: px(v), x2: px(v), y1: H - B, y2: H - B + 4, class: "axis" }));
      g.appendChild(svg("text", { x: px(v), y: H - B + 16, class: "tick", "text-anchor": "middle" }, num(v)));
    }
    g.appendChild(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
    g.appendChild(svg("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }));
    g.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 6, class: "axis-label", "text-anchor": "middle" }, xLabel));
    const caption = el("figcaption");
    caption.appendChild(el("span", title, "chart-title"));
    series.forEach((s, i) => {
      const pts = s.points.slice().sort((a, b) => a[0] - b[0]);
      const line = svg("polyline", { class: "series s" + (i % 6), points: pts.map((p) => px(p[0]) + "," + py(p[1])).join(" ") });
      for (const [k, v] of Object.entries(s.data || {})) line.setAttribute("data-" + k, v);
      line.appendChild(svg("title", {}, s.label));
      g.appendChild(line);
      // Each point is marked, with its value on hover, while few enough
      // to tell apart; the last always.
      pts.forEach((p, j) => {
        if (pts.length > 60 && j !== pts.length - 1) return;
        const dot = svg("circle", { cx: px(p[0]), cy: py(p[1]), r: 2.6, class: "dot s" + (i % 6) });
        dot.appendChild(svg("title", {}, s.label + " at " + xLabel + " " + num(p[0]) + ": " + num(p[1])));
        g.appendChild(dot);
      });
      const key = el("span", null, "key");
      key.appendChild(el("span", null, "swatch s" + (i % 6)));
      key.appendChild(document.createTextNode(s.label + ": last " + num(pts[pts.length - 1][1]) + " (" + pts.length + (pts.length === 1 ? " point)" : " points)")));
      caption.appendChild(key);
    });
    fig.appendChild(g);
    fig.appendChild(caption);
    return fig;
  }

  // metricCharts draws a run's metric events: one chart a metric name
  // (a loss, a validation score), one line a split.
  function metricCharts(events) {
    const names = new Map();
    for (const e of events || []) {
      if (!names.has(e.name)) names.set(e.name, new Map());
      const splits = names.get(e.name);
      if (!splits.has(e.split)) splits.set(e.split, []);
      splits.get(e.split).push([e.step, e.value]);
    }
    const figs = [];
    for (const [name, splits] of names) {
      const series = Array.from(splits, ([split, points]) => ({ label: split, points, data: { split, name } }));
      const all = series.flatMap((s) => s.points.map((p) => p[1]));
      const bounded = BOUNDED.test(name) && all.every((v) => v >= 0 && v <= 1);
      figs.push(lineChart(name + " per step", "step", series, bounded));
    }
    return figs;
  }

  // fig shows a ratio; "–" where its denominator is 0, as the figure says
  // nothing there.
  function ratioText(v, defined) {
    return defined ? v.toFixed(3) : "\u2013";
  }

  function table(head, rows, cls) {
    const t = el("table", null, cls);
    const tr = el("tr");
    for (const h of head) tr.appendChild(el("th", h));
    t.appendChild(el("thead")).appendChild(tr);
    const tb = t.appendChild(el("tbody"));
    for (const r of rows) {
      const row = el("tr");
      for (const c of r) row.appendChild(c instanceof Node ? c : el("td", c));
      tb.appendChild(row);
    }
    return t;
  }

  // schemaScore is one schema's held-out score: its figures per label
  // and, for a nominal schema, its confusion matrix.
  function schemaScore(name, sc) {
    const box = el("div", null, "schema-score");
    box.dataset.schema = name;
    let head = name + " (" + sc.kind + "): " + sc.n + " test items, accuracy " + sc.accuracy.toFixed(3) + ", macro-F1 " + sc.macro_f1.toFixed(3);
    if (sc.cohen_kappa !== undefined) head += ", Cohen's kappa " + sc.cohen_kappa.toFixed(3);
    if (sc.micro_f1 !== undefined) head += ", micro-F1 " + sc.micro_f1.toFixed(3);
    if (sc.n_missing) head += "; " + sc.n_missing + " without a prediction, counted wrong";
    box.appendChild(el("h4", head));
    if (!sc.labels) {
      box.appendChild(el("p", "This run was scored before run.json kept the figures of each label.", "kind"));
      return box;
    }
    const rows = sc.labels.map((l) => [l.label, l.support, ratioText(l.precision, l.tp + l.fp > 0), ratioText(l.recall, l.support > 0),
      ratioText(l.f1, l.tp + l.fp + l.fn > 0), l.tp, l.fp, l.fn, l.tn]);
    box.appendChild(table(["Label", "Support", "Precision", "Recall", "F1", "TP", "FP", "FN", "TN"], rows, "labels"));
    box.appendChild(el("p", "Each label against the rest. Support: test items whose gold label is (or holds) it. " +
      "\u2013: the ratio's denominator is 0 (never predicted, or not in the test split).", "kind"));
    const c = sc.confusion;
    if (c) {
      const head = ["gold \\ predicted", ...c.labels, "no label"];
      const rows = c.labels.map((g, i) => {
        const cells = [el("th", g)];
        c.counts[i].forEach((n, j) => cells.push(el("td", n, i === j ? "diag" : n > 0 ? "off" : "")));
        cells.push(el("td", c.no_label[i], c.no_label[i] > 0 ? "off" : ""));
        return cells;
      });
      const t = table(head, rows, "confusion");
      const cap = t.insertBefore(el("caption", "Confusion matrix: rows the gold label, columns the prediction"), t.firstChild);
      cap.className = "kind";
      box.appendChild(t);
    }
    return box;
  }

  // curveChart is a learning curve run's schema: its metric at each point.
  function curveChart(cv, s) {
    const metric = cv.metric || "macro_f1";
    const label = { macro_f1: "macro-F1", accuracy: "accuracy" }[metric] || metric;
    const series = [{ label, points: s.points.map((p) => [p.percent, p[metric]]), data: { schema: s.schema, metric } }];
    // Each label's F1 too, while the lines stay few enough to tell apart.
    const labels = new Map();
    for (const p of s.points) {
      for (const l of p.labels || []) {
        if (!labels.has(l.label)) labels.set(l.label, []);
        labels.get(l.label).push([p.percent, l.f1]);
      }
    }
    if (labels.size <= 5) {
      for (const [name, points] of labels) series.push({ label: "F1 of " + name, points, data: { schema: s.schema, label: name } });
    }
    const f = lineChart(s.schema + ": " + label + (labels.size <= 5 ? " and each label's F1" : "") + " on " + s.n_test + " test items",
      "% of " + s.n_train_split + " labelled train items", series, true);
    f.dataset.schema = s.schema;
    f.appendChild(el("p", s.sentence, "sentence"));
    const says = (s.labels || []).map((l) => el("li", l.sentence));
    if (says.length) f.appendChild(el("ul", null, "sentences")).replaceChildren(...says);
    return f;
  }

  // reliabilityChart is a schema's reliability diagram (run.json's
  // calibration): on the test split, each bin's mean confidence against
  // the share right, before and after calibration, beside the diagonal a
  // calibrated model follows.
  function reliabilityChart(name, c) {
    const pts = (bins) => (bins || []).map((b) => [b.confidence, b.accuracy]);
    const series = [{ label: "perfect calibration", points: [[0, 0], [1, 1]], data: { schema: name, series: "diagonal" } }];
    const ece = (v) => (typeof v === "number" ? " (ECE " + num(v) + ")" : "");
    if (c.bins_before && c.bins_before.length) series.push({ label: "as trained" + ece(c.ece_before), points: pts(c.bins_before), data: { schema: name, series: "before" } });
    if (c.bins_after && c.bins_after.length) series.push({ label: "calibrated" + ece(c.ece_after), points: pts(c.bins_after), data: { schema: name, series: "after" } });
    const unit = c.unit === "label_decision" ? "label decisions" : "test items";
    const f = lineChart(name + ": reliability on " + (c.n_test || 0) + " " + unit, "confidence (" + (c.binning || "bins") + ")", series, true);
    f.dataset.schema = name;
    const says = c.method === "none"
      ? "Not calibrated: " + (c.reason || "")
      : "Calibrated by " + c.method.replace(/_/g, " ") + " " + num(c.temperature) + ", fitted on " + c.n_val + " val items; expected calibration error " +
        num(c.ece_before) + " before, " + num(c.ece_after) + " after.";
    f.appendChild(el("p", says, "sentence"));
    return f;
  }

  // promotions are the gate's sentences of the schemas not published.
  function promotions(r) {
    const p = r.promotion || {};
    const names = Object.keys(p).sort();
    return names.filter((n) => !p[n].published).map((n) => (names.length > 1 ? n + ": " : "") + p[n].reason);
  }

  function mb(n) {
    return Math.round(n / 1048576) + " MB";
  }

  function duration(s) {
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + " s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + " min " + String(s % 60).padStart(2, "0") + " s";
    return Math.floor(m / 60) + " h " + String(m % 60).padStart(2, "0") + " min";
  }

  function runDuration(r) {
    if (!r.started_at) return "";
    const end = r.finished_at ? Date.parse(r.finished_at) : Date.now();
    return duration((end - Date.parse(r.started_at)) / 1000);
  }

  function score(r) {
    const h = r.heldout;
    if (!h || !h.n) return "";
    let s = "accuracy " + h.accuracy.toFixed(3);
    if (h.macro_f1 !== undefined) s += ", macro-F1 " + h.macro_f1.toFixed(3);
    return s + " (n " + h.n + ")";
  }

  function ordinal(n) {
    const t = n % 100;
    if (t >= 11 && t <= 13) return n + "th";
    return n + (["th", "st", "nd", "rd"][n % 10] || "th");
  }

  function stateText(r) {
    if (r.queue_position) return "queued (" + ordinal(r.queue_position) + " in queue)";
    if (r.state === "error" && r.error) return "error: " + r.error;
    return r.state;
  }

  // showProgress fills the step line and the progress bar of run r.
  function showProgress(r) {
    $("step").textContent = r.step || r.state;
    const bar = $("progress");
    const text = $("progress-text");
    const p = r.progress;
    if (!p || !p.total || finished(r)) {
      bar.removeAttribute("value");
      if (finished(r)) bar.value = r.state === "success" ? 1 : 0;
      text.textContent = finished(r) ? r.state : "";
      return;
    }
    const frac = Math.min(1, p.current / p.total);
    bar.value = frac;
    let t;
    if (p.phase === "fetch") {
      t = "copying the model back: " + mb(p.current) + " of " + mb(p.total);
    } else {
      t = (p.phase || "progress") + " " + Math.round(frac * 100) + "%";
    }
    if (p.eta_s) t += ", ETA " + duration(p.eta_s);
    text.textContent = t;
  }

  async function cancel(id, button) {
    button.disabled = true;
    try {
      await api("POST", "/runs/" + encodeURIComponent(id) + "/cancel");
      showError(null);
    } catch (e) {
      showError(e);
    }
    button.disabled = false;
  }

  // poll calls f now and again after the delay it returns (null: no
  // more), while the page is visible. The function it returns polls at
  // once, after the request in flight if there is one.
  function poll(f) {
    let timer = null;
    let busy = false;
    let again = false;
    let stopped = false;
    async function tick() {
      if (timer !== null) {
        clearTimeout(timer);
        timer = null;
      }
      if (busy) {
        again = true;
        return;
      }
      if (stopped || document.hidden) return;
      busy = true;
      let next = null;
      try {
        next = await f();
      } finally {
        busy = false;
      }
      if (next === null) stopped = true;
      if (again) {
        again = false;
        tick();
      } else if (!stopped) {
        timer = setTimeout(tick, next);
      }
    }
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && timer === null && !busy) tick();
    });
    tick();
    return tick;
  }

  // ---- The Training page ----

  function trainingPage() {
    let current = null;

    function row(r) {
      const tr = el("tr");
      tr.dataset.run = r.run_id;
      tr.className = "state-" + r.state;
      const link = el("a", r.run_id);
      link.href = "/admin/training/runs/" + encodeURIComponent(r.run_id);
      const first = el("td");
      first.appendChild(link);
      tr.appendChild(first);
      // A program's trainer by its file name; the whole path on hover.
      const trainer = el("td", String(r.trainer).replace(/^exec:.*\//, "exec:"), "trainer");
      trainer.title = r.trainer;
      tr.appendChild(trainer);
      tr.appendChild(el("td", (r.schemas || []).join(", ")));
      tr.appendChild(el("td", r.ran_on, "ran-on"));
      tr.appendChild(el("td", stateText(r), "state"));
      const sc = el("td", score(r), "score");
      for (const line of promotions(r)) sc.appendChild(el("div", line, "not-published"));
      tr.appendChild(sc);
      tr.appendChild(el("td", runDuration(r)));
      tr.appendChild(el("td", r.trigger));
      return tr;
    }

    async function refreshRuns() {
      let runs, total;
      try {
        const answer = await request("GET", "/runs?limit=" + tableRows + "&current=1");
        runs = answer.data;
        total = Number(answer.headers.get("X-Total-Count")) || runs.length;
      } catch (e) {
        showError(e);
        return idlePollMS;
      }
      // The table shows the newest runs; the answer may add, after them,
      // the run under way when it is older (current=1).
      const newest = runs.slice(0, tableRows);
      const tbody = $("runs").tBodies[0];
      tbody.replaceChildren(...newest.map(row));
      $("no-runs").hidden = newest.length > 0;
      $("more-runs").hidden = total <= newest.length;
      $("more-runs").textContent = "The newest " + newest.length + " of " + total + " runs; every run is in GET " + API + "/runs.";
      // The current run: the one executing, else the next in the queue;
      // with none, the last run, as it ended.
      current = runs.find((r) => !finished(r) && !r.queue_position) || runs.find((r) => r.queue_position === 1) || null;
      const shown = current || runs[0] || null;
      $("current").hidden = shown === null;
      if (shown) {
        $("current-title").textContent = current ? "Current run" : "Last run";
        $("current-id").textContent = shown.run_id;
        $("current-id").href = "/admin/training/runs/" + encodeURIComponent(shown.run_id);
        $("cancel").hidden = current === null;
        showProgress(shown);
      }
      return current ? pollMS : idlePollMS;
    }

    async function refreshBackends() {
      try {
        const list = await api("GET", "/backends");
        const menu = $("backend");
        for (const b of list) {
          const opt = Array.from(menu.options).find((o) => o.value === b.name);
          if (opt) opt.textContent = b.menu_label;
        }
      } catch (e) {
        showError(e);
      }
      return backendsPollMS;
    }

    async function check() {
      const name = $("backend").value;
      const button = $("check");
      button.disabled = true;
      $("report").hidden = false;
      $("verdict").textContent = "Checking " + name + "...";
      $("verdict").className = "";
      for (const id of ["report-problems", "report-warnings", "report-hints", "report-notes"]) $(id).replaceChildren();
      $("report-json").textContent = "";
      try {
        const rep = await api("GET", "/backends/" + encodeURIComponent(name) + "/check?trainer=" + encodeURIComponent($("trainer").value));
        $("verdict").textContent = (rep.ok ? "Ready: " : "Not ready: ") + rep.summary;
        $("verdict").className = rep.ok ? "ok" : "no";
        $("report-problems").replaceChildren(...(rep.problems || []).map((p) => el("li", p)));
        $("report-warnings").replaceChildren(...(rep.warnings || []).map((p) => el("li", "warning: " + p)));
        $("report-hints").replaceChildren(...(rep.hints || []).map((p) => el("li", "hint: " + p)));
        $("report-notes").replaceChildren(...(rep.notes || []).map((p) => el("li", "note: " + p)));
        $("report-json").textContent = JSON.stringify(rep, null, 2);
        showError(null);
      } catch (e) {
        $("verdict").textContent = "The check could not run: " + e.message;
        $("verdict").className = "no";
      }
      button.disabled = false;
    }

    function share(t) {
      if (!t.n) return "no labels";
      return t.share.toFixed(3) + " (95% CI " + t.ci95_low.toFixed(2) + "\u2013" + t.ci95_high.toFixed(2) + ")";
    }

    // biasText says an annotator's automation-bias test as the report's
    // text does: observed against expected, the p-value and what follows.
    function biasText(b) {
      if (!b.n) return "no label tested";
      const p = b.p_value < 1e-300 ? "<1e-300" : num(b.p_value);
      let t = b.agreed + " of " + b.n + " agreed (" + b.observed.toFixed(3) + "), a careful annotator " + b.expected.toFixed(3) + "; p = " + p;
      if (b.verdict === "flagged") return t + ", below its level " + num(b.level) + ": flagged, possible automation bias (consistent with accepting prelabels unchecked, not proof of it)";
      if (b.verdict === "not_above_expected") return t + ": no more often than expected";
      t += b.counted ? ", above its level " + num(b.level) + ": not significant" : ": too few labels to be significant even were every one the prelabel";
      if (b.items_needed !== undefined) return t + "; about " + b.more_items + " more labels (" + b.items_needed + " in all) would show agreement at this rate 80% of the time, at level " + num(b.power_level);
      return t + "; no number of labels would show agreement at this rate 80% of the time: the test split is too small to tell it from the model's own accuracy";
    }

    function tallies(title, ts) {
      const bias = ts.some((t) => t.bias);
      const head = [title, "Labels", "Accepted", "Share", "95% CI"];
      if (bias) head.push("Expected", "p", "Automation-bias test");
      head.push("Flag");
      return table(head, ts.map((t) => {
        const row = [t.name, t.n, t.accepted, t.n ? t.share.toFixed(3) : "", t.n ? t.ci95_low.toFixed(2) + "\u2013" + t.ci95_high.toFixed(2) : ""];
        if (bias) {
          const b = t.bias;
          row.push(b && b.n ? b.expected.toFixed(3) : "", b && b.p_value !== null && b.p_value !== undefined ? (b.p_value < 1e-300 ? "<1e-300" : num(b.p_value)) : "", b ? biasText(b) : "");
        }
        row.push(t.flag || "");
        return row;
      }), "tallies");
    }

    // review shows a run's precision as the reviewers of Potato's model
    // review judged it, as the report's text says it, and by label.
    function review(rv) {
      const box = el("div", null, "review");
      if (!rv || !rv.all.n) {
        box.appendChild(el("p", "Reviewers' verdicts (Potato's model review): none on this run's prelabels.", "share"));
        return box;
      }
      const a = rv.all;
      box.appendChild(el("p", "Reviewers' verdicts (Potato's model review): " + a.n + " by " + rv.reviewers + (rv.reviewers === 1 ? " reviewer, " : " reviewers, ") +
        a.accept + " accept, " + a.correct + " correct, " + a.reject + " reject: precision " + a.precision.toFixed(3) +
        " (95% CI " + a.ci95_low.toFixed(2) + "\u2013" + a.ci95_high.toFixed(2) + ")" +
        (rv.n_replaced ? "; " + rv.n_replaced + " of them on prelabels the run no longer holds" : "") + ".", "share"));
      box.appendChild(table(["By prelabel label", "Verdicts", "Accept", "Correct", "Reject", "Precision", "95% CI"],
        rv.labels.map((c) => [c.name, c.n, c.accept, c.correct, c.reject, c.precision.toFixed(3), c.ci95_low.toFixed(2) + "\u2013" + c.ci95_high.toFixed(2)]), "tallies"));
      return box;
    }

    // refreshAcceptance shows potato-dispatch report's answer: how
    // annotators took the published prelabels. It reads every annotator's
    // file, so it is read when the page opens and on Refresh only.
    async function refreshAcceptance() {
      const button = $("acceptance-refresh");
      button.disabled = true;
      let rep;
      try {
        rep = await api("GET", "/report");
      } catch (e) {
        $("acceptance-status").textContent = "No report: " + e.message;
        for (const id of ["acceptance-flags", "acceptance-schemas", "acceptance-notes"]) $(id).replaceChildren();
        button.disabled = false;
        return;
      }
      $("acceptance-status").textContent = rep.schemas.length
        ? "Of the items a published run predicted while nobody had labelled them, the labels annotators gave since (report of " + rep.generated_at + "):"
        : "No published prelabels to report on.";
      $("acceptance-flags").replaceChildren(...rep.flags.map((f) => {
        return el("li", "flag: " + f.kind + " " + f.name + " in " + (f.schema || "all schemas") + ": " + f.accepted + " of " + f.n + " accepted (" + f.share.toFixed(3) + "): " + f.reason);
      }));
      $("acceptance-schemas").replaceChildren(...rep.schemas.map((sa) => {
        const box = el("div", null, "acceptance-schema");
        box.dataset.schema = sa.schema;
        box.appendChild(el("h3", sa.schema + " (" + sa.kind + "): run " + sa.run_id + " (" + sa.trainer + ")"));
        box.appendChild(el("p", sa.all.accepted + " of " + sa.all.n + " labels equal to the prelabel: " + share(sa.all) +
          "; " + sa.n_prelabels + " prelabels on items unlabeled in its bundle, " + sa.n_items_labeled + " of those items labelled since.", "share"));
        if (sa.annotators.length) box.appendChild(tallies("By annotator", sa.annotators));
        if (sa.labels.length) box.appendChild(tallies("By prelabel label", sa.labels));
        box.appendChild(review(sa.review));
        return box;
      }));
      if (rep.schemas.length > 1 && rep.annotators.length) {
        const box = el("div", null, "acceptance-schema");
        box.appendChild(el("h3", "All schemas"));
        box.appendChild(tallies("By annotator", rep.annotators));
        $("acceptance-schemas").appendChild(box);
      }
      $("acceptance-notes").replaceChildren(...rep.notes.map((n) => el("li", "note: " + n)));
      $("acceptance-saw").textContent = rep.saw_prelabel;
      $("acceptance-accepted").textContent = rep.accepted;
      $("acceptance-bias").textContent = rep.bias_rule;
      $("acceptance-review").textContent = rep.review_rule || "";
      button.disabled = false;
    }

    refreshAcceptance();
    $("acceptance-refresh").addEventListener("click", refreshAcceptance);

    const runsNow = poll(refreshRuns);
    poll(refreshBackends);

    fitTrainers();
    for (const box of document.querySelectorAll("input[name=schemas]")) box.addEventListener("change", fitTrainers);
    $("check").addEventListener("click", check);
    $("backend").addEventListener("change", () => {
      $("report").hidden = true;
    });
    $("cancel").addEventListener("click", async (ev) => {
      if (current) await cancel(current.run_id, ev.target);
      runsNow();
    });
    $("start-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const button = $("start-run");
      const schemas = Array.from(document.querySelectorAll("input[name=schemas]:checked")).map((i) => i.value);
      button.disabled = true;
      try {
        await api("POST", "/runs", { trainer: $("trainer").value, schemas, backend: $("backend").value });
        showError(null);
      } catch (e) {
        showError(e);
      }
      button.disabled = false;
      runsNow();
    });
  }

  // ---- The run page ----

  function runPage(id) {
    const fields = [
      ["Trainer", (r) => r.trainer],
      ["Schemas", (r) => (r.schemas || []).join(", ")],
      ["Ran on", (r) => r.ran_on],
      ["State", stateText],
      ["Started by", (r) => r.trigger],
      ["Created", (r) => r.created_at],
      ["Started", (r) => r.started_at],
      ["Finished", (r) => r.finished_at],
      ["Duration", runDuration],
      ["Device", (r) => r.device],
      ["Exit code", (r) => (r.exit_code === undefined ? "" : r.exit_code)],
      ["Error", (r) => r.error],
      ["Held-out score", score],
      ["Other metrics", otherMetrics],
      ["Parameters", (r) => (r.params && Object.keys(r.params).length ? JSON.stringify(r.params) : "")],
      ["Artifact location", (r) => r.artifact_uri],
    ];

    // otherMetrics are the trainer's own metrics (result event), those
    // the Model section does not draw.
    function otherMetrics(r) {
      const m = Object.assign({}, r.metrics || {});
      delete m.heldout;
      return Object.keys(m).length ? JSON.stringify(m) : "";
    }

    // model fills the Model section: the gate's decision, the learning
    // curve, the charts of the metric events and the held-out figures.
    function model(r) {
      const p = r.promotion || {};
      $("promotion").replaceChildren(...Object.keys(p).sort().map((n) => el("li", n + ": " + p[n].reason, p[n].published ? "published" : "not-published")));
      $("promotion").hidden = Object.keys(p).length === 0;
      const cal = r.calibration || {};
      const rc = $("calibration");
      const rcs = Object.keys(cal).sort().filter((n) => (cal[n].bins_before || []).length > 0);
      rc.hidden = rcs.length === 0;
      if (rcs.length) rc.replaceChildren(el("h3", "Confidence calibration"), ...rcs.map((n) => reliabilityChart(n, cal[n])));
      const cv = r.curve;
      const lc = $("learning-curve");
      lc.hidden = !cv;
      if (cv) {
        const parts = [el("h3", "Learning curve")];
        if (!cv.schemas || !cv.schemas.length) parts.push(el("p", "Points " + cv.points.join(", ") + "%: not scored yet.", "kind"));
        for (const s of cv.schemas || []) parts.push(curveChart(cv, s));
        lc.replaceChildren(...parts);
      }
      const charts = metricCharts(r.metric_events);
      $("charts").replaceChildren(...charts);
      $("no-charts").hidden = charts.length > 0;
      $("no-charts").textContent = finished(r) ? "The run sent no metric events." : "No metric events yet.";
      const held = (r.metrics && r.metrics.heldout) || {};
      const boxes = Object.keys(held).sort().map((n) => schemaScore(n, held[n]));
      $("scores").replaceChildren(...boxes);
      $("no-scores").hidden = boxes.length > 0;
      $("no-scores").textContent = !finished(r) ? "No held-out score yet." : cv ? "A learning curve run is scored point by point, above." : "The run has no held-out score.";
    }

    function writeback(r) {
      const w = r.writeback;
      if (!w) return finished(r) ? "Nothing was written back." : "Not yet.";
      return (w.n_written || 0) + " of " + (w.n_read || 0) + " predictions written as prelabels; skipped: " +
        (w.n_skipped_train_split || 0) + " in the train split, " +
        (w.n_skipped_low_confidence || 0) + " below min_confidence, " +
        (w.n_skipped_schema_not_enabled || 0) + " of schemas not in writeback.schemas, " +
        (w.n_skipped_newer_run || 0) + " already labelled by a newer run.";
    }

    // retraction says what potato-dispatch retract did, "" before it.
    function retraction(r) {
      if (!r.retracted_at) return "";
      const n = (r.writeback && r.writeback.n_retracted) || 0;
      return "Retracted " + r.retracted_at + ": " + n + (n === 1 ? " prelabel" : " prelabels") +
        " deleted from Potato's store; Potato stops showing them after its next start.";
    }

    async function refresh() {
      let r;
      try {
        r = await api("GET", "/runs/" + encodeURIComponent(id));
      } catch (e) {
        showError(e);
        return idlePollMS;
      }
      showError(null);
      showProgress(r);
      const rows = [];
      for (const [name, f] of fields) {
        const v = f(r);
        if (v === undefined || v === null || v === "") continue;
        const tr = el("tr");
        tr.appendChild(el("th", name));
        tr.appendChild(el("td", v));
        rows.push(tr);
      }
      $("record").tBodies[0].replaceChildren(...rows);
      $("cancel").hidden = finished(r);
      $("writeback").textContent = writeback(r);
      $("retracted").textContent = retraction(r);
      $("retracted").hidden = !r.retracted_at;
      // Prelabels can be retracted once the run is over, if it wrote any.
      const w = r.writeback;
      $("retract-row").hidden = !(finished(r) && w && w.n_written > 0 && !r.retracted_at);
      model(r);
      if (finished(r)) await hubRefresh();
      $("log").textContent = (r.log || []).join("\n");
      $("events").textContent = (r.events || []).map((e) => JSON.stringify(e)).join("\n");
      return finished(r) ? null : pollMS;
    }

    // ---- Publishing the model to the Hugging Face Hub ----

    let hub = null;

    // link is a link to url when it is http(s), else its text alone.
    function link(text, url) {
      if (!/^https?:\/\//.test(url || "")) return el("span", text);
      const a = el("a", text);
      a.href = url;
      a.rel = "noopener noreferrer";
      return a;
    }

    // hubRefresh shows whether the run's model can be published, and
    // why not as the server words it, with the pushes made.
    async function hubRefresh() {
      try {
        hub = await api("GET", "/runs/" + encodeURIComponent(id) + "/hub");
      } catch (e) {
        showError(e);
        return;
      }
      const models = hub.models || [];
      $("hub-form").hidden = !hub.pushable;
      if (!hub.pushable) {
        $("hub-status").textContent = "This run's model cannot be published: " + hub.reason;
      } else {
        $("hub-status").textContent = "The model goes with its tokenizer and a model card (README.md) in one commit.";
        const sel = $("hub-schema");
        if (sel.options.length !== models.length) {
          sel.replaceChildren(...models.map((m) => {
            const o = el("option", m.schema + " (" + m.kind + ", " + m.files + " files, " + num(m.bytes / 1048576) + " MB)");
            o.value = m.schema;
            return o;
          }));
        }
        $("hub-schema-row").hidden = models.length < 2;
        hubBaseRow();
        $("hub-token").textContent = hub.token ? "The server's token, from " + hub.token + ", is sent." : hub.no_token;
        $("hub-push").disabled = !hub.token;
      }
      $("hub-pushes").replaceChildren(...(hub.pushes || []).slice().reverse().map((p) => {
        const li = el("li", p.pushed_at + ": " + p.schema + " to ");
        li.appendChild(link(p.repo, p.repo_url));
        li.appendChild(document.createTextNode(" (" + (p.private ? "private" : "public") + "), branch " + p.revision + ", commit "));
        li.appendChild(link(String(p.commit_oid).slice(0, 12), p.commit_url));
        return li;
      }));
    }

    // The base model's id is asked for when the run named a directory.
    function hubBaseRow() {
      const m = ((hub && hub.models) || []).find((x) => x.schema === $("hub-schema").value);
      $("hub-base-row").hidden = !m || m.base_model !== "";
    }
    $("hub-schema").addEventListener("change", hubBaseRow);

    $("hub-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const button = $("hub-push");
      button.disabled = true;
      $("hub-done").hidden = false;
      $("hub-done").textContent = "Publishing: a large model takes minutes.";
      const req = { repo: $("hub-repo").value.trim(), private: !$("hub-public").checked, revision: $("hub-revision").value.trim(),
        schema: $("hub-schema").value || "", base_model: $("hub-base-row").hidden ? "" : $("hub-base").value.trim() };
      try {
        const res = await api("POST", "/runs/" + encodeURIComponent(id) + "/hub", req);
        showError(null);
        $("hub-done").replaceChildren(document.createTextNode("Published to "), link(res.repo, res.repo_url),
          document.createTextNode(" (" + (res.private ? "private" : "public") + "), branch " + res.revision + ": commit "),
          link(String(res.commit_oid).slice(0, 12), res.commit_url));
      } catch (e) {
        $("hub-done").hidden = true;
        showError(e);
      }
      button.disabled = false;
      await hubRefresh();
    });

    // The run page stops polling once its run is over.
    poll(refresh);
    $("cancel").addEventListener("click", (ev) => cancel(id, ev.target));

    // Retracting takes two clicks: the button, then the confirmation.
    function confirming(on) {
      $("retract").hidden = on;
      $("retract-confirm").hidden = !on;
    }
    $("retract").addEventListener("click", () => confirming(true));
    $("retract-no").addEventListener("click", () => confirming(false));
    $("retract-yes").addEventListener("click", async (ev) => {
      const button = ev.target;
      button.disabled = true;
      try {
        await api("DELETE", "/runs/" + encodeURIComponent(id) + "/predictions");
        showError(null);
      } catch (e) {
        showError(e);
      }
      button.disabled = false;
      confirming(false);
      await refresh();
    });
  }

  if (body.dataset.run) {
    runPage(body.dataset.run);
  } else {
    trainingPage();
  }
})();
