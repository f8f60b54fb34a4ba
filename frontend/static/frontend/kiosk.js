// The booth's kiosk, on top of arena.js: after a vote the reveal stays up for a few seconds,
// then the screen clears for a new voter; a voter idle too long is cleared the same way. The
// server renews the voter identity too (after each vote, and when a battle starts after idle
// time), so a stuck timer here never lets two people share one.
(() => {
  "use strict";
  const body = document.body;
  const idleMs = Number(body.dataset.idleMs) || 90000;
  const revealMs = Number(body.dataset.revealMs) || 0;
  let idleTimer = null;
  let revealTimer = null;

  function csrfToken() {
    const field = document.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  async function nextVoter() {
    clearTimeout(revealTimer);
    revealTimer = null;
    try {
      await fetch("/kiosk/next-voter", {
        method: "POST",
        headers: { "X-CSRFToken": csrfToken() },
        credentials: "same-origin",
      });
    } catch (_) { /* the server renews the voter on its own after idle time */ }
    document.dispatchEvent(new CustomEvent("arena:clear"));
    document.activeElement && document.activeElement.blur();
    armIdle();
  }

  function armIdle() {
    clearTimeout(idleTimer);
    if (revealTimer === null) idleTimer = setTimeout(nextVoter, idleMs);
  }

  ["pointerdown", "keydown", "input", "touchstart", "wheel", "scroll"].forEach((name) =>
    document.addEventListener(name, armIdle, { passive: true, capture: true }));

  document.addEventListener("arena:voted", () => {
    clearTimeout(idleTimer);
    revealTimer = setTimeout(nextVoter, revealMs);
  });
  // "New battle" on the kiosk is the next person: a new voter now, not after the reveal.
  document.getElementById("new-battle").addEventListener("click", nextVoter);

  // No way off the page: no context menu, and full screen from the first touch (browsers allow
  // it only in a user gesture; a kiosk browser started with --kiosk is full screen already).
  document.addEventListener("contextmenu", (event) => event.preventDefault());
  // The kiosk is this one page: a link that would leave it (another site, another page of the
  // arena, a new window) is refused, so the booth never ends up on a page without this script
  // and its idle reset. Answers render no links; this holds whatever reaches the page.
  function refuseLeaving(event) {
    const link = event.target instanceof Element && event.target.closest("a[href], area[href]");
    if (!link) return;
    const target = new URL(link.href, location.href);
    const samePage = target.origin === location.origin && target.pathname === location.pathname
      && target.search === location.search && !link.target && !link.hasAttribute("download");
    if (!samePage) event.preventDefault();
  }
  ["click", "auxclick"].forEach((name) =>
    document.addEventListener(name, refuseLeaving, { capture: true }));
  document.addEventListener("submit", (event) => {
    const action = new URL(event.target.getAttribute("action") || "", location.href);
    if (action.origin !== location.origin) event.preventDefault();
  }, { capture: true });
  document.addEventListener("pointerdown", () => {
    if (!document.fullscreenElement && document.documentElement.requestFullscreen) {
      document.documentElement.requestFullscreen().catch(() => {});
    }
  }, { once: true });

  armIdle();
})();
