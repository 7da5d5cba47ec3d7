// The dashboard: the public API only, with the bearer token kept in session storage.
// Views: "#/" (jobs, filtered by "#/?state=&label=&name=", and workers, refreshed every 2 s) and "#/jobs/<id>" (one job, live from its
// server-sent events; fetch() reads the stream because EventSource cannot send a token).
"use strict";

const TOKEN_KEY = "trainjobs-token";
const view = document.getElementById("view");
let stopView = () => {};

const token = () => sessionStorage.getItem(TOKEN_KEY);

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: { ...(options.headers || {}), Authorization: `Bearer ${token()}` } });
  if (response.status === 401) { signOut(); throw new Error("signed out"); }
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw new Error(typeof body.detail === "string" ? body.detail : `HTTP ${response.status}`);
  }
  return response;
}

const h = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  node.append(...children.flat().map((child) => (child instanceof Node ? child : document.createTextNode(String(child ?? "")))));
  return node;
};
const stateBadge = (state) => h("span", { class: `state ${state}` }, state);
// Progress inside the running epoch (from rank 0, at least every 10 s): a bar, or nothing.
function progressBar(job, id) {
  const progress = job.state === "running" ? job.progress : null;
  if (!progress || !progress.steps) return "";
  const percent = Math.min(100, (100 * progress.step) / progress.steps);
  return h("span", { class: "progress-bar", id, "data-step": progress.step, "data-steps": progress.steps,
    title: `epoch ${progress.epoch}: step ${progress.step} of ${progress.steps}` }, h("i", { style: `width:${percent.toFixed(1)}%` }));
}
const mib = (bytes) => (Number.isFinite(bytes) ? `${(bytes / 2 ** 20).toFixed(0)} MiB` : "–");
const percent = (fraction) => (Number.isFinite(fraction) ? `${(100 * fraction).toFixed(0)}%` : "–");
const eta = (seconds) => (Number.isFinite(seconds) ? (seconds < 90 ? `${Math.round(seconds)}s` : `${Math.round(seconds / 60)}m`) : "–");
const fmt = (value, digits = 4) => (Number.isFinite(value) ? value.toFixed(digits) : "–");
function age(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 90) return `${Math.round(seconds)}s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)}m`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)}h`;
  return `${Math.round(seconds / 86400)}d`;
}

// ---- sign-in -------------------------------------------------------------------------------

function preemptedMark(job) {
  // A job that gave its devices to another: how many times, and to whom (its waiting reason says).
  if (!job.preemptions) return "";
  return h("span", { class: "chip preempted", title: job.waiting_reason || "" }, ` preempted ×${job.preemptions}`);
}

function showSignIn() {
  stopView();
  const form = h("form", { id: "sign-in" },
    h("h1", {}, "Sign in"),
    h("p", {}, "Paste an API token (from ", h("code", {}, "trainjobs token create"), "). It is kept in this tab's session storage only."),
    h("input", { id: "token", type: "password", autocomplete: "off", placeholder: "tj_...", required: "" }),
    h("button", { type: "submit", id: "sign-in-button" }, "Sign in"),
    h("p", { id: "sign-in-error", class: "error" }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const candidate = form.querySelector("#token").value.trim();
    const response = await fetch("/v1/jobs?limit=1", { headers: { Authorization: `Bearer ${candidate}` } });
    if (!response.ok) { form.querySelector("#sign-in-error").textContent = "That token is not valid."; return; }
    sessionStorage.setItem(TOKEN_KEY, candidate);
    route();
  });
  view.replaceChildren(form);
  document.getElementById("sign-out").hidden = true;
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  showSignIn();
}
document.getElementById("sign-out").addEventListener("click", signOut);

// ---- jobs and workers ----------------------------------------------------------------------

// Filters live in the URL's query (#/?state=failed&label=team%3Dspeech&name=asr), so a filtered
// view can be bookmarked and shared. "Load more" adds a page; the refresh re-reads what is shown.
const PAGE = 50;

function filterQuery(filters) {
  const query = new URLSearchParams();
  if (filters.state) query.set("state", filters.state);
  for (const label of filters.labels) query.append("label", label);
  if (filters.name) query.set("name", filters.name);
  return query;
}

function parseLabels(text) {
  return text.split(/[\s,]+/).map((part) => part.trim()).filter(Boolean);
}

function showJobs(params) {
  const filters = { state: params.get("state") || "", labels: params.getAll("label"), name: params.get("name") || "" };
  const stateFilter = h("select", { id: "state-filter" },
    [["", "all states"], ...JOB_STATES.map((state) => [state]),
      [[...TERMINAL_STATES].join(","), "finished"]].map(([value, label]) => h("option", { value }, label || value)));
  stateFilter.value = filters.state;
  const labelFilter = h("input", { id: "label-filter", placeholder: "team=speech sweep", size: 22, value: filters.labels.join(" "),
    title: "k=v or k alone, separated by spaces: jobs carrying all of them" });
  const nameFilter = h("input", { id: "name-filter", placeholder: "name contains", size: 16, value: filters.name });
  const jobsBody = h("tbody", { id: "jobs" });
  const workersBody = h("tbody", { id: "workers" });
  const sharesBody = h("tbody", { id: "shares" });
  const loadMore = h("button", { id: "load-more", hidden: "" }, "Load more");
  const count = h("span", { class: "muted", id: "jobs-count" });
  const error = h("p", { class: "error" });
  let pages = 1;
  view.replaceChildren(
    h("h1", {}, "Jobs"),
    h("form", { class: "toolbar", id: "filters" }, h("label", {}, "State ", stateFilter), h("label", {}, "Labels ", labelFilter),
      h("label", {}, "Name ", nameFilter), h("button", { type: "submit" }, "Filter"), count),
    h("table", {}, h("thead", {}, h("tr", {}, ["name", "id", "owner", "model", "state", "epoch", "last loss", "age", "worker"].map((t) => h("th", {}, t)))), jobsBody),
    h("div", { class: "toolbar more" }, loadMore),
    h("h2", {}, "Workers"),
    h("table", {}, h("thead", {}, h("tr", {}, ["host", "device", "busy / slots", "jobs", "last seen"].map((t) => h("th", {}, t)))), workersBody),
    h("h2", {}, "Shares"),
    h("table", {}, h("thead", {}, h("tr", {}, ["owner", "device", "in use", "fair share", "weight", "cap"].map((t) => h("th", {}, t)))), sharesBody),
    error);

  function applyFilters(event) {
    if (event) event.preventDefault();
    const query = filterQuery({ state: stateFilter.value, labels: parseLabels(labelFilter.value), name: nameFilter.value.trim() });
    location.hash = `#/?${query}`;  // route() shows the list again with these filters
  }
  view.querySelector("#filters").addEventListener("submit", applyFilters);
  stateFilter.addEventListener("change", applyFilters);
  loadMore.addEventListener("click", () => { pages += 1; refresh(); });

  const labelChips = (job) => Object.entries(job.spec.labels || {}).map(([key, value]) => h("span", { class: "chip", title: "show jobs with this label",
    onclick: (event) => { event.stopPropagation(); labelFilter.value = [...parseLabels(labelFilter.value), `${key}=${value}`].join(" "); applyFilters(); } },
  value === "" ? key : `${key}=${value}`));

  async function refresh() {
    try {
      const jobs = [];
      let cursor = null;
      for (let page = 0; page < pages; page += 1) {
        const query = filterQuery(filters);
        query.set("limit", PAGE);
        if (cursor) query.set("cursor", cursor);
        const body = await (await api(`/v1/jobs?${query}`)).json();
        jobs.push(...body.items);
        cursor = body.next_cursor;
        if (!cursor) break;
      }
      loadMore.hidden = !cursor;
      count.textContent = `${jobs.length}${cursor ? "+" : ""} job${jobs.length === 1 ? "" : "s"}`;
      jobsBody.replaceChildren(...jobs.map((job) => h("tr", { class: "job-row", "data-job": job.id, onclick: () => { location.hash = `#/jobs/${job.id}`; } },
        h("td", {}, job.name || "–", " ", labelChips(job)), h("td", { class: "muted" }, job.id), h("td", {}, job.owner), h("td", {}, job.spec.model.name),
        h("td", {}, stateBadge(job.state), preemptedMark(job)), h("td", {}, `${job.epoch}/${job.spec.epochs} `, progressBar(job)),
        h("td", {}, job.metrics ? fmt(job.metrics.train_loss) : "–"), h("td", {}, age(job.created_at)), h("td", {}, job.worker || "–"))));
      const workers = (await (await api("/v1/workers")).json()).items;
      workersBody.replaceChildren(...workers.map((worker) => h("tr", {},
        h("td", {}, worker.hostname), h("td", {}, worker.device), h("td", {}, `${worker.busy} / ${worker.slots}`),
        h("td", {}, worker.jobs.join(", ") || "–"), h("td", {}, worker.lost ? "lost" : `${age(worker.last_seen)} ago`))));
      const shares = [];
      for (const device of new Set(workers.map((worker) => worker.device))) {
        const queue = await (await api(`/v1/queue?device=${device}`)).json();
        shares.push(...queue.owners.map((owner) => h("tr", { class: owner.in_use > owner.share ? "above-share" : "" },
          h("td", {}, owner.owner), h("td", {}, device), h("td", {}, String(owner.in_use)), h("td", {}, owner.share.toFixed(1)),
          h("td", {}, String(owner.weight)), h("td", {}, owner.max_devices === null ? "–" : String(owner.max_devices)))));
      }
      sharesBody.replaceChildren(...shares);
      error.textContent = "";
    } catch (problem) { error.textContent = problem.message; }
  }
  refresh();
  const timer = setInterval(refresh, 2000);
  return () => clearInterval(timer);
}

// ---- one job -------------------------------------------------------------------------------

function showJob(jobId) {
  const aborter = new AbortController();
  let job = null;
  const metrics = [];
  const checkpoints = new Map();
  const header = h("div", { id: "job-header" });
  const chart = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  chart.setAttribute("class", "chart");
  chart.id = "loss-chart";
  const memoryChart = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  memoryChart.setAttribute("class", "chart small");
  memoryChart.id = "memory-chart";
  // Which figure the chart shows: the objective's, until someone picks another.
  let figure = null;
  const figureChoice = h("select", { id: "figure-choice", onchange: (event) => { figure = event.target.value; drawChart(); } });
  const legendTrain = h("span", { id: "legend-train" }), legendVal = h("span", { id: "legend-val" });
  const epochsBody = h("tbody", { id: "epochs" });
  const dataHint = h("p", { class: "hint", id: "data-wait-hint", hidden: "" },
    "Training waited for data much of the time: raise the data set's num_workers, turn on pin_memory, or pre-pack the data (",
    h("code", {}, "trainjobs data pack"), ").");
  const checkpointsBody = h("tbody", { id: "checkpoints" });
  const logs = h("pre", { id: "logs" });
  const spec = h("pre", { id: "spec" });
  const error = h("p", { class: "error", id: "page-error" });
  view.replaceChildren(
    h("p", {}, h("a", { href: "#/" }, "← all jobs")), header,
    h("div", { class: "grid" },
      h("div", { class: "card" }, h("h2", {}, "Figures and learning rate ", figureChoice),
        h("div", { class: "legend" }, legendTrain, legendVal, h("span", {}, h("i", { style: "background:#9aa3b5" }), "lr (right axis)")),
        chart),
      h("div", { class: "card" }, h("h2", {}, "Checkpoints"),
        h("table", {}, h("thead", {}, h("tr", {}, ["epoch", "size", "best", ""].map((t) => h("th", {}, t)))), checkpointsBody))),
    h("div", { class: "grid" },
      h("div", { class: "card" }, h("h2", {}, "Peak memory per epoch (the most any rank held)"), memoryChart),
      h("div", { class: "card" }, h("h2", {}, "Each epoch"),
        h("table", {}, h("thead", {}, h("tr", {}, ["epoch", "data wait", "peak memory", "GPU"].map((t) => h("th", {}, t)))), epochsBody),
        dataHint)),
    h("h2", {}, "Log tail"), logs, h("h2", {}, "Spec"), spec, error);

  function renderHeader() {
    const canCancel = job && !TERMINAL_STATES.has(job.state) && job.state !== "cancelling";
    header.replaceChildren(
      h("h1", {}, job.name || job.id, " ", stateBadge(job.state)),
      h("dl", {},
        h("dt", {}, "id"), h("dd", {}, job.id), h("dt", {}, "owner"), h("dd", {}, job.owner),
        h("dt", {}, "epoch"), h("dd", { id: "job-epoch" }, `${job.epoch} of ${job.spec.epochs}`),
        job.state === "running" && job.progress ? [h("dt", {}, "this epoch"), h("dd", {}, progressBar(job, "job-progress"),
          ` step ${job.progress.step} of ${job.progress.steps}, ${job.progress.samples_per_second.toFixed(0)} samples/s, ETA ${eta(job.progress.eta_seconds)}`)] : [],
        h("dt", {}, "model / data"), h("dd", {}, `${job.spec.model.name} on ${job.spec.data.name}, ${job.effective.world_size} ${job.spec.device} rank(s)`),
        h("dt", {}, "worker"), h("dd", {}, `${job.worker || "–"} (attempt ${job.attempt})`),
        job.preemptions ? [h("dt", {}, "preempted"), h("dd", { id: "job-preemptions" }, `${job.preemptions} time${job.preemptions === 1 ? "" : "s"}`)] : [],
        h("dt", {}, "priority"), h("dd", {}, `${job.spec.priority}${job.spec.preemptible ? "" : ", never preempted"}`),
        h("dt", {}, "stop reason"), h("dd", {}, job.stop_reason || "–"),
        job.waiting_reason ? [h("dt", {}, "waiting"), h("dd", {}, job.waiting_reason)] : []),
      job.error ? h("p", { class: "error", id: "job-error" }, job.error) : "",
      h("div", { class: "toolbar", id: "job-actions" },
        canCancel ? h("button", { class: "danger", id: "cancel", onclick: cancel }, "Cancel job") : "",
        TERMINAL_STATES.has(job.state) ? h("button", { class: "danger", id: "delete", onclick: confirmDelete }, "Delete job…") : ""));
    spec.textContent = JSON.stringify(job.spec, null, 2);
  }

  function drawChart() {
    const figures = chartFigures(metrics);
    const objective = job ? job.spec.objective.metric.replace(/^(train|val)_/, "") : "loss";
    const shown = figure && figures.includes(figure) ? figure : figures.includes(objective) ? objective : figures[0] || "loss";
    if ([...figureChoice.options].map((option) => option.value).join() !== figures.join()) {
      figureChoice.replaceChildren(...figures.map((name) => h("option", { value: name }, name)));
    }
    figureChoice.value = shown;
    legendTrain.replaceChildren(h("i", { style: "background:var(--blue)" }), `train ${shown}`);
    legendVal.replaceChildren(h("i", { style: "background:var(--orange)" }), `validation ${shown}`);
    drawLossChart(chart, metrics, shown);
  }

  function renderEpochs() {
    drawMemoryChart(memoryChart, metrics);
    epochsBody.replaceChildren(...metrics.map((row) => h("tr", { class: "epoch-row" },
      h("td", {}, row.epoch), h("td", { class: row.data_wait_fraction > 0.3 ? "warn" : "" }, percent(row.data_wait_fraction)),
      h("td", {}, mib(row.peak_memory_bytes)), h("td", {}, row.gpu_utilization == null ? "–" : percent(row.gpu_utilization)))));
    const last = metrics[metrics.length - 1];
    dataHint.hidden = !(last && last.data_wait_fraction > 0.3);
  }

  function renderCheckpoints() {
    checkpointsBody.replaceChildren(...[...checkpoints.values()].sort((a, b) => a.epoch - b.epoch).map((checkpoint) => h("tr", {},
      h("td", {}, checkpoint.epoch), h("td", {}, `${(checkpoint.size_bytes / 1e6).toFixed(2)} MB`), h("td", {}, checkpoint.is_best ? "best" : ""),
      h("td", {}, h("button", { class: "download", onclick: () => download(checkpoint) }, "download")))));
  }

  async function download(checkpoint) {
    const blob = await (await api(`/v1/jobs/${jobId}/checkpoints/${checkpoint.id}`)).blob();
    const link = h("a", { href: URL.createObjectURL(blob), download: `${checkpoint.id}.pt` });
    link.click();
    URL.revokeObjectURL(link.href);
  }

  async function cancel() {
    try {
      job = await (await api(`/v1/jobs/${jobId}/cancel`, { method: "POST" })).json();
      renderHeader();
    } catch (problem) { error.textContent = problem.message; }
  }

  // Deleting is for good (metrics, logs, checkpoint files): ask once more, in the page.
  function confirmDelete() {
    header.querySelector("#job-actions").replaceChildren(
      h("span", { id: "delete-question" }, "Delete this job with its metrics, logs and checkpoint files? This cannot be undone. "),
      h("button", { class: "danger", id: "delete-confirm", onclick: remove }, "Delete"),
      h("button", { id: "delete-keep", onclick: renderHeader }, "Keep"));
  }

  async function remove() {
    try {
      await api(`/v1/jobs/${jobId}`, { method: "DELETE" });
      location.hash = "#/";
    } catch (problem) { error.textContent = problem.message; }
  }

  async function refreshCheckpoints() {
    try {
      const items = (await (await api(`/v1/jobs/${jobId}/checkpoints`)).json()).items;
      checkpoints.clear();
      for (const row of items) checkpoints.set(row.id, row);
      renderCheckpoints();
    } catch (problem) { error.textContent = problem.message; }
  }

  async function refreshLogs() {
    try { logs.textContent = (await (await api(`/v1/jobs/${jobId}/logs?tail=40`)).text()) || "(no output yet)"; } catch (problem) { /* shown elsewhere */ }
  }

  function apply(kind, data) {
    if (kind === "state") { job = data; renderHeader(); }
    if (kind === "metrics" && !metrics.some((row) => row.epoch === data.epoch)) {
      metrics.push(data);
      metrics.sort((a, b) => a.epoch - b.epoch);
      drawChart();
      renderEpochs();
      if (job) { job.epoch = Math.max(job.epoch, data.epoch); renderHeader(); }
    }
    if (kind === "progress" && job) { job.progress = data; renderHeader(); }
    // Rotation removes old checkpoints, which the stream does not announce: re-read the list.
    if (kind === "checkpoint") refreshCheckpoints();
  }

  async function follow() {
    // The job, its metrics and checkpoints so far; then every event after, from the stream.
    try {
      job = await (await api(`/v1/jobs/${jobId}`)).json();
      renderHeader();
      for (const row of (await (await api(`/v1/jobs/${jobId}/metrics`)).json()).items) apply("metrics", row);
      drawChart();
      renderEpochs();
      await refreshCheckpoints();
      await refreshLogs();
      let lastId = 0;
      while (!aborter.signal.aborted) {
        const response = await api(`/v1/jobs/${jobId}/events`, { signal: aborter.signal, headers: lastId ? { "Last-Event-ID": String(lastId) } : {} });
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const fields = Object.fromEntries(block.split("\n").filter((line) => !line.startsWith(":")).map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 2)]));
            if (fields.data) { lastId = Number(fields.id); apply(fields.event, JSON.parse(fields.data)); }
          }
        }
        if (job && TERMINAL_STATES.has(job.state)) break;
      }
      await refreshLogs();
    } catch (problem) {
      if (!aborter.signal.aborted) error.textContent = problem.message;
    }
  }
  follow();
  const logTimer = setInterval(() => { if (job && !TERMINAL_STATES.has(job.state)) refreshLogs(); }, 3000);
  return () => { aborter.abort(); clearInterval(logTimer); };
}

// ---- routing -------------------------------------------------------------------------------

function route() {
  stopView();
  if (!token()) { showSignIn(); return; }
  document.getElementById("sign-out").hidden = false;
  const match = location.hash.match(/^#\/jobs\/([\w-]+)$/);
  const query = location.hash.startsWith("#/?") ? location.hash.slice(3) : "";
  stopView = match ? showJob(match[1]) : showJobs(new URLSearchParams(query));
}
window.addEventListener("hashchange", route);
route();
