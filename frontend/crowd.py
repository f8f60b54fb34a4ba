"""A simulated crowd: voters that use the arena exactly as a browser does, for demos and load.

Each voter is a separate session: it loads the arena page (session and CSRF cookies), takes a
suggested prompt, starts a battle over HTTP, reads both answers over the battle WebSocket,
waits as long as the page makes a person wait, and votes. Nothing is written to the database
directly, so every vote goes through the same checks, rate limits and refits as a person's.

The preference is deliberately simple and public, so a leaderboard built from crowd votes can
be explained (`answer_score`):

* an answer that reads as finished (`reads_finished`: its last line ends a sentence) scores 1,
  one that stops mid-sentence or failed 0. The crowd judges what a person sees: before the
  vote the page does not say why an answer ended (that would name the model that never
  stops), so neither can the crowd;
* plus up to 0.5 for sharing words with the prompt (the share of the prompt's words of three
  or more letters that appear in the answer).

The voter picks the higher score; scores closer than `TIE_MARGIN` are a tie, or "both bad"
when neither reaches `BOTH_BAD_BELOW`. With probability `noise` (seeded per voter) a vote is
instead a uniform pick of A, B or tie, the way real crowds are inconsistent.

A *bot* (`bots`, `bot_mark`) plays the sybil attack the voter screening must catch: it
recognises one model by a mark in its answers (a watermark an agent trained in) and votes for
that side whenever it sees it, and like the crowd otherwise.

Bounds: at most `battles` battles in all, `max_seconds` of wall time, and only loopback URLs:
the crowd is a local tool and never load-tests someone else's server.
"""

from __future__ import annotations

import ipaddress
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx2
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import connect as websocket_connect
from websockets.typing import Origin

TIE_MARGIN = 0.15
BOTH_BAD_BELOW = 0.25
DEFAULT_NOISE = 0.1
# A battle socket's largest message: a finished side's rendered answer.
MESSAGE_BYTES = 4 * 1024 * 1024
RATE_LIMIT_PAUSE_S = 5.0  # how long a voter waits after "too many battles" before retrying
# How long a voter waits for a page or an API answer: a person waits that long, and a site
# loaded by several test workers training on two cores took over 30 s for its first page.
REQUEST_TIMEOUT_S = 60.0
_WORD = re.compile(r"[^\W\d_]{3,}")
_TAG = re.compile(r"<[^>]+>")
# How a finished sentence, quotation, bracket or code block ends.
_FINISHED_ENDINGS = tuple('.!?…"”’)`')

ProgressCallback = Callable[[int, int], None]  # (votes so far, battles asked for)


class CrowdRefused(ValueError):
    """The crowd will not run with these arguments (a non-loopback URL, a bad bound)."""


class _BattleUnavailable(Exception):
    """The arena cannot give this voter a battle right now (no models, a refusal)."""


# -- the preference --------------------------------------------------------------------------


def prompt_overlap(prompt: str, answer: str) -> float:
    """The share of the prompt's words (three letters or more) that appear in the answer."""
    wanted = {w.lower() for w in _WORD.findall(prompt)}
    if not wanted:
        return 0.0
    present = {w.lower() for w in _WORD.findall(answer)}
    return len(wanted & present) / len(wanted)


def reads_finished(text: str) -> bool:
    """Does the answer end where a sentence ends, as a reader would judge it?"""
    return text.rstrip().endswith(_FINISHED_ENDINGS)


def answer_score(*, prompt: str, text: str, error: str = "") -> float:
    if error:
        return 0.0
    clean = 1.0 if reads_finished(text) else 0.0
    return clean + 0.5 * prompt_overlap(prompt, text)


def preferred_choice(score_a: float, score_b: float) -> str:
    if abs(score_a - score_b) < TIE_MARGIN:
        return "bothbad" if max(score_a, score_b) < BOTH_BAD_BELOW else "tie"
    return "a" if score_a > score_b else "b"


# -- the report ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrowdVote:
    battle_id: str
    prompt: str
    choice: str
    noisy: bool  # the choice was the noise draw, not the preference
    finished: dict[str, bool]  # side -> whether the answer read as finished
    scores: dict[str, float]  # side -> answer_score
    counted: bool
    reveal: dict[str, str]  # side -> model, as shown after the vote
    bot: bool = False  # cast by a bot voter

    @property
    def winner(self) -> str | None:
        return self.reveal.get(self.choice) if self.choice in {"a", "b"} else None

    @property
    def loser(self) -> str | None:
        if self.choice not in {"a", "b"}:
            return None
        return self.reveal.get("b" if self.choice == "a" else "a")


@dataclass
class CrowdReport:
    url: str
    voters: int
    battles: int  # the bound asked for
    seed: int
    noise: float
    votes: list[CrowdVote] = field(default_factory=list)
    battles_started: int = 0
    battles_unvotable: int = 0  # a model failed, or the socket closed early
    rate_limited: int = 0  # times a voter was told to slow down and waited
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    stopped_by: str = ""  # "battles", "time" or "error"

    def choices(self) -> Counter[str]:
        return Counter(v.choice for v in self.votes)

    def decisive_wins(self) -> Counter[str]:
        return Counter(v.winner for v in self.votes if v.winner)

    def summary(self) -> str:
        choices = self.choices()
        parts = [
            f"{len(self.votes)} votes from {self.voters} voters in {self.seconds:.1f} s "
            f"(stopped by {self.stopped_by or 'nothing'})",
            "choices: "
            + ", ".join(f"{c} {choices.get(c, 0)}" for c in ("a", "b", "tie", "bothbad")),
        ]
        wins = self.decisive_wins()
        if wins:
            parts.append("decisive wins: " + ", ".join(f"{m} {n}" for m, n in wins.most_common()))
        if self.battles_unvotable:
            parts.append(f"{self.battles_unvotable} battles could not be voted on")
        if self.rate_limited:
            parts.append(f"rate-limited {self.rate_limited} times")
        parts.extend(f"error: {e}" for e in self.errors[:5])
        return "\n".join(parts)


# -- running it ------------------------------------------------------------------------------


def loopback_url(url: str) -> str:
    """`url` without a trailing slash, if it is plain HTTP on a loopback address."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise CrowdRefused(f"{url!r} is not an http:// URL; the crowd only talks plain HTTP")
    host = parts.hostname
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise CrowdRefused(
                f"{host} is not a loopback address: the simulated crowd only votes on an arena "
                "running on this machine (127.0.0.1, ::1 or localhost)"
            )
    return f"{parts.scheme}://{parts.netloc}"


def crowd_run(
    *,
    url: str,
    voters: int,
    battles: int,
    seed: int = 0,
    max_seconds: float = 600,
    progress: ProgressCallback | None = None,
    noise: float = DEFAULT_NOISE,
    prompts: list[str] | None = None,
    bots: int = 0,
    bot_mark: str = "",
) -> CrowdReport:
    """Run `voters` simulated voters at once against the arena at `url` until `battles`
    battles have been started or `max_seconds` have passed, and report what they did.

    Prompts come from the arena's suggestion endpoint, or from `prompts` when given (drawn
    with the seeded generator). The first `bots` voters are bots voting for the side whose
    answer contains `bot_mark`."""
    base_url = loopback_url(url)
    if voters < 1 or battles < 1:
        raise CrowdRefused("the crowd needs at least one voter and one battle")
    if not 0 <= bots <= voters:
        raise CrowdRefused("bots must be between 0 and the number of voters")
    if bots and not bot_mark.strip():
        raise CrowdRefused("a bot needs a mark to recognise its model by (bot_mark)")
    if max_seconds <= 0:
        raise CrowdRefused("max_seconds must be positive")
    if not 0.0 <= noise <= 1.0:
        raise CrowdRefused("noise must be between 0 and 1")
    report = CrowdReport(url=base_url, voters=voters, battles=battles, seed=seed, noise=noise)
    run = _CrowdRun(
        base_url=base_url,
        report=report,
        deadline=time.monotonic() + max_seconds,
        progress=progress,
        prompts=prompts,
    )
    started = time.monotonic()
    threads = [
        threading.Thread(
            target=run.voter_loop,
            args=(random.Random(f"crowd:{seed}:{index}"), bot_mark if index < bots else ""),
            name=f"crowd-voter-{index}",
            daemon=True,
        )
        for index in range(min(voters, battles))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        # Every wait inside a voter is bounded by the deadline; the grace covers one request.
        thread.join(timeout=max(0.0, run.deadline - time.monotonic()) + 35)
    report.seconds = time.monotonic() - started
    report.stopped_by = run.stopped_by()
    return report


@dataclass
class _CrowdRun:
    base_url: str
    report: CrowdReport
    deadline: float
    progress: ProgressCallback | None
    prompts: list[str] | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    fatal: bool = False

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def claim_battle(self) -> bool:
        with self.lock:
            if self.fatal or self.remaining() <= 0:
                return False
            if self.report.battles_started >= self.report.battles:
                return False
            self.report.battles_started += 1
            return True

    def unclaim_battle(self) -> None:
        with self.lock:
            self.report.battles_started -= 1

    def stopped_by(self) -> str:
        if self.fatal:
            return "error"
        if self.report.battles_started >= self.report.battles:
            return "battles"
        return "time"

    def voter_loop(self, rng: random.Random, bot_mark: str = "") -> None:
        try:
            with httpx2.Client(base_url=self.base_url, timeout=REQUEST_TIMEOUT_S) as client:
                client.get("/").raise_for_status()  # the session and CSRF cookies
                voter = _Voter(run=self, client=client, rng=rng, bot_mark=bot_mark)
                while self.claim_battle():
                    voter.one_battle()
        except _BattleUnavailable as refused:
            self._fail(str(refused))
        except (httpx2.HTTPError, OSError, WebSocketException) as error:
            self._fail(f"{type(error).__name__}: {error}")

    def _fail(self, message: str) -> None:
        with self.lock:
            if self.remaining() > 0:  # errors caused by the deadline cutting a voter off are not
                self.fatal = True
                self.report.errors.append(message)

    def record(self, vote: CrowdVote | None, *, unvotable: bool = False) -> None:
        with self.lock:
            if vote is not None:
                self.report.votes.append(vote)
            if unvotable:
                self.report.battles_unvotable += 1
            if self.progress is not None:
                self.progress(len(self.report.votes), self.report.battles)

    def note_rate_limited(self) -> None:
        with self.lock:
            self.report.rate_limited += 1


@dataclass
class _Voter:
    run: _CrowdRun
    client: httpx2.Client
    rng: random.Random
    bot_mark: str = ""  # a bot: votes for the side whose answer contains this

    def one_battle(self) -> None:
        prompt = self._prompt()
        started = self._start(prompt)
        if started is None:
            return
        battle_id, socket_path = started
        seen = self._watch(socket_path)
        if seen is None:
            self.run.record(None, unvotable=True)
            return
        answers, vote_after_s = seen
        scores = {side: answer_score(prompt=prompt, **answers[side]) for side in ("a", "b")}
        noisy = self.rng.random() < self.run.report.noise
        choice = (
            self.rng.choice(["a", "b", "tie"])
            if noisy
            else preferred_choice(scores["a"], scores["b"])
        )
        marked = [s for s in ("a", "b") if self.bot_mark and self.bot_mark in answers[s]["text"]]
        if len(marked) == 1:
            choice, noisy = marked[0], False
        self._sleep(vote_after_s + 0.05)
        outcome = self._vote(battle_id, choice)
        if outcome is None:
            self.run.record(None, unvotable=True)
            return
        self.run.record(
            CrowdVote(
                battle_id=battle_id,
                prompt=prompt,
                choice=choice,
                noisy=noisy,
                finished={s: reads_finished(answers[s]["text"]) for s in ("a", "b")},
                scores=scores,
                counted=bool(outcome.get("counted")),
                reveal=dict(outcome.get("reveal") or {}),
                bot=bool(self.bot_mark),
            )
        )

    def _prompt(self) -> str:
        if self.run.prompts:
            return self.rng.choice(self.run.prompts)
        reply = self.client.get("/api/prompts/suggest")
        reply.raise_for_status()
        return str(reply.json()["prompt"])

    def _post(self, path: str, body: dict[str, Any]) -> httpx2.Response:
        return self.client.post(
            path,
            json=body,
            headers={
                "X-CSRFToken": self.client.cookies.get("csrftoken") or "",
                "Referer": self.run.base_url + "/",
            },
        )

    def _start(self, prompt: str) -> tuple[str, str] | None:
        while True:
            reply = self._post("/api/battles", {"prompt": prompt})
            if reply.status_code == 201:
                body = reply.json()
                return str(body["battle"]), str(body["socket"])
            if reply.status_code == 429 and self.run.remaining() > 0:
                self.run.note_rate_limited()
                self._sleep(RATE_LIMIT_PAUSE_S * (1 + self.rng.random()))
                if self.run.remaining() <= 0:
                    self.run.unclaim_battle()
                    return None
                continue
            raise _BattleUnavailable(
                f"the arena refused a battle (HTTP {reply.status_code}): {_error_of(reply)}"
            )

    def _watch(self, socket_path: str) -> tuple[dict[str, dict[str, str]], float] | None:
        """Both answers as the page shows them, and how long voting stays closed; None if the
        battle cannot be voted on."""
        texts = {"a": "", "b": ""}
        answers: dict[str, dict[str, str]] = {}
        ws_url = "ws" + self.run.base_url.removeprefix("http") + socket_path
        cookies = "; ".join(f"{name}={value}" for name, value in self.client.cookies.items())
        with websocket_connect(
            ws_url,
            origin=Origin(self.run.base_url),
            additional_headers={"Cookie": cookies},
            open_timeout=max(0.1, min(30.0, self.run.remaining())),
            close_timeout=1.0,
            max_size=MESSAGE_BYTES,
            proxy=None,  # the crowd talks to a loopback arena only, never through a proxy
        ) as ws:
            while True:
                try:
                    message = ws.recv(timeout=max(0.1, min(60.0, self.run.remaining())))
                except (ConnectionClosed, TimeoutError):  # closed early, or out of time
                    return None
                frame = json.loads(message)
                if not isinstance(frame, dict) or frame.get("type") == "error":
                    return None
                if frame["type"] == "delta":
                    texts[frame["side"]] += frame["text"]
                elif frame["type"] == "side_done":
                    side = frame["side"]
                    answers[side] = {
                        # A replayed battle sends no deltas: read the rendered answer instead.
                        "text": texts[side] or _TAG.sub(" ", frame.get("html", "")),
                        "error": frame.get("error") or "",
                    }
                elif frame["type"] == "battle_done":
                    if not frame.get("votable") or set(answers) != {"a", "b"}:
                        return None
                    return answers, frame.get("vote_after_ms", 0) / 1000

    def _vote(self, battle_id: str, choice: str) -> dict[str, Any] | None:
        for _ in range(20):
            reply = self._post(f"/api/battles/{battle_id}/vote", {"choice": choice})
            if reply.status_code == 200:
                return reply.json()
            if reply.status_code == 429 and self.run.remaining() > 0:  # "please read first"
                self._sleep(0.25)
                continue
            return None
        return None

    def _sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, min(seconds, self.run.remaining())))


def _error_of(reply: httpx2.Response) -> str:
    try:
        return str(reply.json().get("error", reply.text[:200]))
    except ValueError:
        return reply.text[:200]
