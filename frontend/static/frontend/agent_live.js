// An agent's trajectory as it happens (organizers, live) or late (the public view).
// Everything the agent wrote goes in with textContent: a <script> in its output is text.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const initial = JSON.parse($("live-initial").textContent);
  const MAX_SHOWN = 1000; // older events leave the page; "Load older" brings them back
  const shownIds = new Set();
  let lastId = 0; // the newest event seen: a new socket resumes after it
  let socket = null;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function field(list, name, value) {
    if (value === undefined || value === null || value === "") return;
    list.append(el("dt", "", name), el("dd", "", value));
  }

  function block(title, text) {
    const wrap = el("div", "block");
    wrap.append(el("div", "block-title", title), el("pre", "", text));
    return wrap;
  }

  function eventCard(event) {
    const card = el("article", `event kind-${event.kind}`);
    card.dataset.id = String(event.id);
    const head = el("header", "event-head");
    const when = new Date(event.at);
    head.append(
      el("time", "", when.toISOString().replace("T", " ").slice(0, 19) + " UTC"),
      el("span", "kind", event.kind.replace("_", " ")),
      el("span", event.reported ? "badge reported" : "badge observed",
        event.reported ? "reported" : "observed"),
    );
    card.append(head);
    const facts = el("dl", "facts");
    if (event.kind === "tool_call") {
      field(facts, "tool", event.tool);
      field(facts, "exit code", event.exit_code);
      field(facts, "duration", event.duration_s === null ? "" : `${event.duration_s} s`);
      card.append(facts, block("command", event.command), block("output", event.output));
    } else if (event.kind === "model_call") {
      field(facts, "model", event.model);
      field(facts, "status", event.status);
      field(facts, "tokens", `${event.prompt_tokens ?? "?"} in, ${event.completion_tokens ?? "?"} out`);
      if ("cost_usd" in event) field(facts, "cost", `$${event.cost_usd}`);
      field(facts, "latency", event.latency_ms === null ? "" : `${event.latency_ms} ms`);
      field(facts, "error", event.error);
      card.append(facts);
      const last = event.last_message || {};
      if (last.content) card.append(block(`last message (${last.role || "?"})`, last.content));
      card.append(block("reply", event.reply));
      if (event.proposed_commands) {
        // Commands the reply proposes (fenced shell): a scaffold runs them unseen by the platform.
        card.append(block("proposed commands", event.proposed_commands));
      }
      if (event.tool_calls) card.append(block("tool calls", event.tool_calls));
    } else if (event.kind === "api_call") {
      field(facts, "call", `${event.method} ${event.path}`);
      field(facts, "status", event.status);
      field(facts, "duration", event.duration_ms === null ? "" : `${event.duration_ms} ms`);
      card.append(facts);
    } else {
      card.append(block("content", event.content));
    }
    return card;
  }

  // Events go in by id, newest on top, whatever order they arrive in; one shown is skipped.
  function addEvents(events) {
    const list = $("events");
    for (const event of events) {
      if (shownIds.has(event.id)) continue;
      shownIds.add(event.id);
      lastId = Math.max(lastId, event.id);
      const card = eventCard(event);
      let before = null;
      for (const other of list.children) {
        if (Number(other.dataset.id) < event.id) { before = other; break; }
      }
      list.insertBefore(card, before);
    }
    while (list.children.length > MAX_SHOWN) {
      shownIds.delete(Number(list.lastElementChild.dataset.id));
      list.lastElementChild.remove();
      $("older").hidden = false;
    }
    $("no-events").hidden = list.children.length > 0;
    $("shown-count").textContent = `(${list.children.length} shown)`;
  }

  function renderBudget(bars) {
    const box = $("bars");
    if (!box) return;
    box.replaceChildren();
    for (const bar of bars) {
      const row = el("div", bar.over ? "bar over" : "bar");
      row.dataset.key = bar.key;
      const meter = el("meter");
      meter.min = 0;
      meter.max = 1;
      meter.value = bar.fraction;
      const unit = bar.unit === "$" ? "" : ` ${bar.unit}`;
      const money = bar.unit === "$" ? "$" : "";
      row.append(
        el("span", "bar-label", bar.label), meter,
        el("span", "figures", `${money}${bar.used.toFixed(2)} of ${money}${bar.limit.toFixed(2)}${unit}`),
      );
      box.append(row);
    }
  }

  function renderJournal(entries) {
    const list = $("journal-entries");
    list.replaceChildren();
    for (const entry of entries) {
      const item = el("li");
      item.append(el("span", "muted", `${entry.at.replace("T", " ").slice(0, 16)} UTC · ${entry.kind}`), el("p", "", entry.text));
      list.append(item);
    }
    $("no-journal").hidden = entries.length > 0;
  }

  async function loadOlder() {
    const ids = [...shownIds];
    if (!ids.length) return;
    const button = $("older");
    button.disabled = true;
    try {
      const response = await fetch(`${initial.events_url}?before=${Math.min(...ids)}`);
      const page = await response.json();
      const list = $("events");
      for (const event of page.events.slice().reverse()) {
        if (shownIds.has(event.id)) continue;
        shownIds.add(event.id);
        list.append(eventCard(event)); // older than all shown: at the bottom
      }
      button.hidden = !page.more;
      $("shown-count").textContent = `(${list.children.length} shown)`;
    } finally {
      button.disabled = false;
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}${initial.socket}?after=${lastId}`);
    socket.onopen = () => {
      $("connection").textContent = initial.public ? `${initial.delay_minutes} minutes late` : "live";
    };
    socket.onmessage = (message) => {
      const frame = JSON.parse(message.data);
      if (frame.type === "event") addEvents([frame.event]);
      if (frame.type === "events") {
        addEvents(frame.events);
        if (frame.more) socket.send(JSON.stringify({ type: "after", id: lastId }));
      }
      if (frame.type === "status") {
        renderBudget(frame.budget);
        renderJournal(frame.journal);
      }
    };
    socket.onclose = (closed) => {
      if (closed.code === 4403 || closed.code === 4404) {
        $("connection").textContent = "not allowed: reload the page";
        return;
      }
      $("connection").textContent = "reconnecting…";
      setTimeout(connect, 2000);
    };
  }

  addEvents(initial.events);
  $("older").hidden = initial.events.length < initial.page_events;
  $("older").addEventListener("click", loadOlder);
  renderBudget(initial.budget);
  renderJournal(initial.journal);
  connect();
})();
