// The voter's page: start a battle, stream both answers over a WebSocket, vote, see the reveal.
// Streaming text is shown with textContent (never parsed as HTML); the finished answer is
// replaced by HTML the server has already sanitised.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const form = $("prompt-form");
  const promptBox = $("prompt");
  const voteButtons = Array.from(document.querySelectorAll("button.vote"));
  const SIDES = ["a", "b"];
  let current = null; // {id, socket, done: {a, b}, text: {a, b}}

  function csrfToken() {
    const field = form.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  async function postJSON(url, body) {
    const reply = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify(body),
      credentials: "same-origin",
    });
    let data = {};
    try { data = await reply.json(); } catch (_) { data = { error: `The server answered ${reply.status}.` }; }
    return { ok: reply.ok, status: reply.status, data };
  }

  function notice(message) {
    const box = $("notice");
    box.textContent = message || "";
    box.hidden = !message;
  }

  function updateCount() {
    $("prompt-count").textContent = `${promptBox.value.length} / ${promptBox.dataset.max}`;
  }

  function setVoting(enabled) {
    voteButtons.forEach((button) => { button.disabled = !enabled; });
  }

  function resetBattleView(prompt) {
    $("battle").hidden = false;
    $("shown-prompt").textContent = prompt;
    $("result").hidden = true;
    $("result").classList.remove("void");
    setVoting(false);
    $("vote-hint").textContent = "Voting opens once both answers are complete.";
    SIDES.forEach((side) => {
      $(`body-${side}`).textContent = "";
      $(`body-${side}`).classList.add("streaming");
      $(`status-${side}`).textContent = "Waiting for the first words…";
      $(`reveal-${side}`).textContent = "";
    });
  }

  async function startBattle(event) {
    event.preventDefault();
    const prompt = promptBox.value.trim();
    if (!prompt) { notice("Please type a prompt first."); return; }
    notice("");
    $("send").disabled = true;
    const reply = await postJSON("/api/battles", { prompt });
    if (!reply.ok) {
      $("send").disabled = false;
      notice(reply.data.error || "Could not start a battle.");
      return;
    }
    resetBattleView(prompt);
    current = { id: reply.data.battle, done: { a: false, b: false }, text: { a: "", b: "" } };
    openSocket(reply.data.socket);
  }

  function openSocket(path) {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}${path}`);
    current.socket = socket;
    socket.onmessage = (message) => handleFrame(JSON.parse(message.data));
    socket.onclose = () => {
      if (current && current.socket === socket && !(current.done.a && current.done.b)) {
        notice("The connection closed before both answers finished. Please start a new battle.");
        $("send").disabled = false;
      }
    };
  }

  function handleFrame(frame) {
    if (frame.type === "delta") {
      const side = frame.side;
      current.text[side] += frame.text;
      $(`body-${side}`).textContent = current.text[side];
      $(`status-${side}`).textContent = "Writing…";
    } else if (frame.type === "side_done") {
      const side = frame.side;
      current.done[side] = true;
      const body = $(`body-${side}`);
      body.classList.remove("streaming");
      body.innerHTML = frame.html; // sanitised on the server
      // The same for every model: how an answer ended is revealed only after the vote.
      $(`status-${side}`).textContent = frame.error || "Done.";
    } else if (frame.type === "battle_done") {
      $("send").disabled = false;
      if (frame.votable) {
        $("vote-hint").textContent = "Read both answers, then vote.";
        setTimeout(() => { if (current && !current.voted) setVoting(true); }, frame.vote_after_ms || 0);
      } else {
        $("vote-hint").textContent = frame.message;
        showNewBattle(frame.message, true);
      }
    } else if (frame.type === "error") {
      notice(frame.message);
    }
  }

  async function castVote(choice) {
    if (!current) return;
    setVoting(false);
    const reply = await postJSON(`/api/battles/${encodeURIComponent(current.id)}/vote`, { choice });
    if (!reply.ok) {
      notice(reply.data.error || "Your vote could not be recorded.");
      if (reply.data.code === "too_early") setTimeout(() => setVoting(true), 1000);
      return;
    }
    current.voted = true;
    notice("");
    SIDES.forEach((side) => { $(`reveal-${side}`).textContent = `— ${reply.data.reveal[side]}`; });
    showNewBattle(reply.data.message, !reply.data.counted);
    // The kiosk (kiosk.js) clears the screen for the next voter a few seconds after this.
    document.dispatchEvent(new CustomEvent("arena:voted"));
  }

  function showNewBattle(message, isVoid) {
    $("result-message").textContent = message;
    $("result").classList.toggle("void", Boolean(isVoid));
    $("result").hidden = false;
    $("vote-hint").textContent = "";
  }

  function newBattle() {
    if (current && current.socket) current.socket.close();
    current = null;
    notice("");
    $("send").disabled = false;
    $("battle").hidden = true;
    // Cleared, not just hidden: at a kiosk the next person must not find the last one's battle.
    $("shown-prompt").textContent = "";
    $("result-message").textContent = "";
    SIDES.forEach((side) => {
      $(`body-${side}`).textContent = "";
      $(`reveal-${side}`).textContent = "";
      $(`status-${side}`).textContent = "";
    });
    promptBox.value = "";
    updateCount();
    promptBox.focus();
  }

  async function suggest() {
    const reply = await fetch("/api/prompts/suggest", { credentials: "same-origin" });
    if (reply.ok) {
      promptBox.value = (await reply.json()).prompt;
      updateCount();
    }
  }

  form.addEventListener("submit", startBattle);
  promptBox.addEventListener("input", updateCount);
  $("suggest").addEventListener("click", suggest);
  $("new-battle").addEventListener("click", newBattle);
  document.addEventListener("arena:clear", newBattle); // the kiosk's next voter
  voteButtons.forEach((button) => button.addEventListener("click", () => castVote(button.dataset.choice)));
})();
