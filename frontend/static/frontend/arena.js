// The voter's page: start a battle, stream both answers over a WebSocket, continue the
// conversation with both models for a few turns if the voter wants, vote, see the reveal.
// Streaming text is shown with textContent (never parsed as HTML); the finished answer is
// replaced by HTML the server has already sanitised.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const form = $("prompt-form");
  const promptBox = $("prompt");
  const voteButtons = Array.from(document.querySelectorAll("button.vote"));
  const SIDES = ["a", "b"];
  const followUpForm = $("follow-up-form");
  const followUpBox = $("follow-up");
  const maxTurns = Number($("battle").dataset.maxTurns || 1);
  let current = null; // {id, socket, turn, done: {a, b}, text: {a, b}, voted}

  // Turn 1's answers are the page's own boxes; a follow-up's are added below them.
  const bodyOf = (side, turn) => $(turn > 1 ? `body-${side}-${turn}` : `body-${side}`);
  const statusOf = (side, turn) => $(turn > 1 ? `status-${side}-${turn}` : `status-${side}`);

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

  function clearFollowUps() {
    $("follow-ups").replaceChildren();
    followUpForm.hidden = true;
    followUpBox.value = "";
  }

  function offerFollowUp() {
    const left = maxTurns - current.turn;
    if (left <= 0 || current.voted) { followUpForm.hidden = true; return; }
    $("follow-up-left").textContent = `${left} more ${left === 1 ? "question" : "questions"} before you vote, if you like.`;
    $("send-follow-up").disabled = false;
    followUpForm.hidden = false;
  }

  function addTurnView(turn, prompt) {
    // Built from elements and textContent: the prompt is the voter's text, never HTML.
    const row = document.createElement("section");
    row.className = "turn";
    row.id = `turn-${turn}`;
    const shown = document.createElement("p");
    shown.className = "shown-prompt";
    const label = document.createElement("span");
    label.className = "muted";
    label.textContent = `Follow-up ${turn - 1}: `;
    const text = document.createElement("span");
    text.className = "turn-prompt";
    text.textContent = prompt;
    shown.append(label, text);
    const answers = document.createElement("div");
    answers.className = "answers";
    SIDES.forEach((side) => {
      const box = document.createElement("article");
      box.className = "answer";
      box.dataset.side = side;
      const heading = document.createElement("h2");
      heading.textContent = `Model ${side.toUpperCase()}`;
      const status = document.createElement("div");
      status.className = "status muted";
      status.id = `status-${side}-${turn}`;
      status.textContent = "Waiting for the first words…";
      const body = document.createElement("div");
      body.className = "body streaming";
      body.id = `body-${side}-${turn}`;
      body.setAttribute("aria-live", "polite");
      box.append(heading, status, body);
      answers.append(box);
    });
    row.append(shown, answers);
    $("follow-ups").append(row);
  }

  function resetBattleView(prompt) {
    clearFollowUps();
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
    current = { id: reply.data.battle, turn: 1, done: { a: false, b: false }, text: { a: "", b: "" } };
    openSocket(reply.data.socket);
  }

  async function sendFollowUp(event) {
    event.preventDefault();
    if (!current || current.voted) return;
    const prompt = followUpBox.value.trim();
    if (!prompt) { notice("Please type a prompt first."); return; }
    notice("");
    $("send-follow-up").disabled = true;
    const reply = await postJSON(`/api/battles/${encodeURIComponent(current.id)}/turns`, { prompt });
    if (!reply.ok) {
      $("send-follow-up").disabled = false;
      notice(reply.data.error || "Could not send your follow-up.");
      return;
    }
    // No vote until both models have answered the follow-up too.
    setVoting(false);
    $("vote-hint").textContent = "Voting opens once both answers are complete.";
    followUpForm.hidden = true;
    followUpBox.value = "";
    const previous = current.socket;
    current.turn = reply.data.turn;
    current.done = { a: false, b: false };
    current.text = { a: "", b: "" };
    addTurnView(current.turn, prompt);
    openSocket(reply.data.socket);
    if (previous) previous.close();
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
    const turn = frame.turn || 1;
    if ((frame.type === "delta" || frame.type === "side_done") && turn !== current.turn) return;
    if (frame.type === "delta") {
      const side = frame.side;
      current.text[side] += frame.text;
      bodyOf(side, turn).textContent = current.text[side];
      statusOf(side, turn).textContent = "Writing…";
    } else if (frame.type === "side_done") {
      const side = frame.side;
      current.done[side] = true;
      const body = bodyOf(side, turn);
      body.classList.remove("streaming");
      body.innerHTML = frame.html; // sanitised on the server
      // The same for every model: how an answer ended is revealed only after the vote.
      statusOf(side, turn).textContent = frame.error || "Done.";
    } else if (frame.type === "battle_done") {
      $("send").disabled = false;
      if (frame.votable) {
        $("vote-hint").textContent = "Read both answers, then vote — or ask both models more.";
        offerFollowUp();
        const votable = current;
        const turn = current.turn;
        // Not if a follow-up was sent meanwhile: its answers must be complete first.
        setTimeout(() => {
          if (current === votable && !current.voted && current.turn === turn) setVoting(true);
        }, frame.vote_after_ms || 0);
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
    $("send-follow-up").disabled = true;
    const reply = await postJSON(`/api/battles/${encodeURIComponent(current.id)}/vote`, { choice });
    if (!reply.ok) {
      notice(reply.data.error || "Your vote could not be recorded.");
      if (reply.data.code === "too_early") setTimeout(() => setVoting(true), 1000);
      $("send-follow-up").disabled = false;
      return;
    }
    current.voted = true;
    followUpForm.hidden = true; // the vote closes the battle
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
    clearFollowUps();
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
  followUpForm.addEventListener("submit", sendFollowUp);
  promptBox.addEventListener("input", updateCount);
  $("suggest").addEventListener("click", suggest);
  $("new-battle").addEventListener("click", newBattle);
  document.addEventListener("arena:clear", newBattle); // the kiosk's next voter
  voteButtons.forEach((button) => button.addEventListener("click", () => castVote(button.dataset.choice)));
})();
