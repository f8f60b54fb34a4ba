// The conference screen: one WebSocket, a new table on every refit, style-controlled or raw.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  let latest = null;
  let kind = "style";
  let updatedAt = null;

  function cell(text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  function intervalBar(row, low, high) {
    const td = document.createElement("td");
    td.className = "bar-cell";
    const track = document.createElement("div");
    track.className = "bar-track";
    const span = document.createElement("div");
    span.className = "bar-span";
    const dot = document.createElement("div");
    dot.className = "bar-dot";
    const position = (x) => `${(100 * (x - low)) / Math.max(high - low, 1e-9)}%`;
    span.style.left = position(row.ci_low); // set through the DOM: allowed by the CSP
    span.style.width = `calc(${position(row.ci_high)} - ${position(row.ci_low)})`;
    dot.style.left = position(row.score);
    track.append(span, dot);
    td.append(track);
    return td;
  }

  function render() {
    const table = latest && latest[kind] ? latest[kind] : latest && latest.raw;
    const rows = $("rows");
    rows.replaceChildren();
    if (!table || !table.scores.length) {
      const tr = document.createElement("tr");
      tr.append(cell("Waiting for the first votes…", "muted"));
      tr.firstChild.colSpan = 5;
      rows.append(tr);
      return;
    }
    const low = Math.min(...table.scores.map((s) => s.ci_low)) - 10;
    const high = Math.max(...table.scores.map((s) => s.ci_high)) + 10;
    for (const row of table.scores) {
      const tr = document.createElement("tr");
      tr.dataset.model = row.model;
      tr.append(cell(row.rank), cell(row.model, "model"), cell(row.score.toFixed(0), "score"),
        intervalBar(row, low, high), cell(row.n_battles));
      rows.append(tr);
    }
    $("battles").textContent = `${latest.n_battles} counted battles`;
  }

  function tick() {
    if (!updatedAt) return;
    const seconds = Math.max(0, Math.round((Date.now() - updatedAt.getTime()) / 1000));
    $("updated").textContent = `updated ${updatedAt.toLocaleTimeString()} (${seconds} s ago)`;
  }

  function choose(which) {
    kind = which;
    $("show-style").setAttribute("aria-pressed", String(which === "style"));
    $("show-raw").setAttribute("aria-pressed", String(which === "raw"));
    $("show-style").classList.toggle("secondary", which !== "style");
    $("show-raw").classList.toggle("secondary", which !== "raw");
    render();
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/ws/leaderboard/`);
    socket.onopen = () => { $("connection").textContent = "live"; };
    socket.onmessage = (message) => {
      const frame = JSON.parse(message.data);
      if (frame.type !== "leaderboard") return;
      latest = frame.table;
      updatedAt = latest.computed_at ? new Date(latest.computed_at) : null;
      render();
      tick();
    };
    socket.onclose = () => {
      $("connection").textContent = "reconnecting…";
      setTimeout(connect, 2000);
    };
  }

  $("show-style").addEventListener("click", () => choose("style"));
  $("show-raw").addEventListener("click", () => choose("raw"));
  setInterval(tick, 1000);
  connect();
})();
