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
      tr.appendChild(el("td", score(r), "score"));
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

    const runsNow = poll(refreshRuns);
    poll(refreshBackends);

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
      ["Metrics", (r) => (r.metrics ? JSON.stringify(r.metrics) : "")],
      ["Parameters", (r) => (r.params && Object.keys(r.params).length ? JSON.stringify(r.params) : "")],
      ["Artifact location", (r) => r.artifact_uri],
    ];

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
      $("log").textContent = (r.log || []).join("\n");
      $("events").textContent = (r.events || []).map((e) => JSON.stringify(e)).join("\n");
      return finished(r) ? null : pollMS;
    }

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
