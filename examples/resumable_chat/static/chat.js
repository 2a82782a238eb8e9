"use strict";
// The resumable chat page: vanilla JS on the app's AG-UI endpoint (POST /agent).
//
// EventSource cannot POST, so each stream is a fetch() whose body is read as it arrives and
// parsed as Server-Sent Events (data: / id: lines, a blank line ends an event). The page
// remembers the last `id:` it saw; when a stream drops before its RUN_FINISHED / RUN_ERROR it
// waits RETRY_MS and POSTs the same RunAgentInput (same runId) again with `Last-Event-ID`:
// the server sends RUN_STARTED and what was still open (the reply being streamed) again
// without ids, then every later event exactly once.
//
// On load the page POSTs /agent/connect for its thread: the thread's MESSAGES_SNAPSHOT (what
// the checkpoint holds), then its live run's events (the reply in flight from its start), or
// RUN_FINISHED — with the interrupt outcome while a refund waits for approval.
//
// sessionStorage keeps the thread (chat.thread); chat.run and chat.lastEventId show the run
// being followed and the last event id drawn. The page never deduplicates: a token that came
// twice, or not at all, stays visible, and a streamed reply that differs from the final
// message (MESSAGES_SNAPSHOT) is kept as streamed and flagged data-mismatch="true".
(() => {
  const AGENT = "/agent";
  const RETRY_MS = 300;
  const MAX_RETRY_MS = 5000;
  const KEY = { thread: "chat.thread", run: "chat.run", last: "chat.lastEventId" };
  const $ = (id) => document.getElementById(id);
  const transcript = $("transcript");
  /** message id -> {el, span, text, final, streamed} */
  const messages = new Map();
  let thread = null;
  /** the interrupts the thread waits for (RUN_FINISHED outcome) */
  let pending = [];
  /** the stream being read: {controller} (a newer stream supersedes it) */
  let current = null;

  function newId(prefix) {
    if (window.crypto && crypto.randomUUID) return `${prefix}-${crypto.randomUUID()}`;
    return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  function setStatus(state, text) {
    const el = $("status");
    el.dataset.state = state;
    el.textContent = text || state;
    document.body.dataset.state = state;
  }

  function setBusy(busy) {
    $("send").disabled = busy;
  }

  function setRun(runId) {
    if (runId) sessionStorage.setItem(KEY.run, runId);
    else sessionStorage.removeItem(KEY.run);
    if (runId) $("run-id").textContent = runId;
  }

  function setLastEventId(id) {
    sessionStorage.setItem(KEY.last, id);
    $("last-event-id").textContent = id;
  }

  // -- the transcript ------------------------------------------------------------------

  function addMessage(role, text, id, final) {
    const el = document.createElement("div");
    el.className = `msg ${role}`;
    el.dataset.role = role;
    el.dataset.final = String(final);
    if (id) el.dataset.id = id;
    const span = document.createElement("span");
    span.className = "text";
    span.textContent = text;
    el.append(span);
    transcript.append(el);
    el.scrollIntoView({ block: "end" });
    const entry = { el, span, text, final, streamed: false };
    if (id) messages.set(id, entry);
    return entry;
  }

  function setFinal(m) {
    m.final = true;
    m.el.dataset.final = "true";
  }

  function clearTranscript() {
    transcript.replaceChildren();
    messages.clear();
  }

  function textOf(content) {
    if (typeof content === "string") return content;
    if (content == null) return "";
    return JSON.stringify(content);
  }

  function onStart(ev) {
    const m = messages.get(ev.messageId);
    if (m) {
      m.streamed = true; // a re-sent opener (rejoin after Last-Event-ID): the text stays
      return;
    }
    addMessage(ev.role === "user" ? "user" : "assistant", "", ev.messageId, false).streamed = true;
  }

  function onContent(ev) {
    let m = messages.get(ev.messageId);
    if (!m) {
      // content without its start: draw it anyway, so the gap is visible
      m = addMessage(ev.role || "assistant", "", ev.messageId, false);
      m.streamed = true;
    }
    m.text += ev.delta || "";
    m.span.textContent = m.text;
  }

  function onEnd(ev) {
    const m = messages.get(ev.messageId);
    if (m) setFinal(m);
  }

  /** MESSAGES_SNAPSHOT: the thread's messages; on a page load (fresh) they replace the
   * transcript; during a run they settle what was streamed (kept as streamed, flagged when
   * it differs), and replace the rest. */
  function onSnapshot(ev, fresh) {
    if (fresh) clearTranscript();
    const order = [];
    for (const msg of ev.messages || []) {
      if (msg.role !== "user" && msg.role !== "assistant") continue; // tools: not drawn
      const text = textOf(msg.content);
      let m = messages.get(msg.id);
      if (!m) {
        m = addMessage(msg.role, text, msg.id, true);
      } else if (!m.streamed) {
        m.text = text;
        m.span.textContent = text;
        setFinal(m);
      } else if (m.text !== text) {
        // keep what was streamed, so a lost or doubled token stays visible
        console.warn("streamed text differs from the final message", msg.id);
        m.el.dataset.mismatch = "true";
      }
      order.push(m);
    }
    // the snapshot's order; a message still streaming that it does not hold stays after it
    const listed = new Set(order);
    for (const [id, m] of messages) {
      if (listed.has(m)) continue;
      if (m.streamed && !m.final) order.push(m);
      else {
        m.el.remove();
        messages.delete(id);
      }
    }
    transcript.replaceChildren(...order.map((m) => m.el));
  }

  // -- approvals -----------------------------------------------------------------------

  function question(interrupt) {
    if (typeof interrupt.message === "string" && interrupt.message) return interrupt.message;
    const raw = interrupt.metadata && interrupt.metadata.langgraph && interrupt.metadata.langgraph.raw;
    if (raw && typeof raw.question === "string") return raw.question;
    return JSON.stringify(raw === undefined ? interrupt : raw);
  }

  function showApproval(interrupts) {
    pending = interrupts;
    $("approval-question").textContent = question(interrupts[0]);
    $("approval").hidden = false;
    setBusy(true); // the thread waits for the decision, not for a new message
    $("approve").disabled = false;
    $("decline").disabled = false;
  }

  function hideApproval() {
    pending = [];
    $("approval").hidden = true;
  }

  // -- streams -------------------------------------------------------------------------

  /** Reads an SSE body: calls onEvent(id or null, event) per event (event null: a block
   * with an id and no data, which only moves the last event id); resolves at the end of the
   * body (rejects when the connection breaks). */
  async function readEvents(body, onEvent) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let id = null;
    let data = [];
    const line = (text) => {
      if (text === "") {
        if (data.length) onEvent(id, JSON.parse(data.join("\n")));
        else if (id !== null) onEvent(id, null);
        id = null;
        data = [];
        return;
      }
      if (text.startsWith(":")) return; // a comment (keep-alive)
      const colon = text.indexOf(":");
      const field = colon < 0 ? text : text.slice(0, colon);
      let value = colon < 0 ? "" : text.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") data.push(value);
      else if (field === "id") id = value;
    };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop(); // an unfinished line waits for the next chunk
      for (const text of lines) line(text);
    }
  }

  /** Follows a stream to its RUN_FINISHED or RUN_ERROR, reconnecting a dropped one:
   * kind "run" POSTs /agent (input.runId: a new run, or one to rejoin), kind "connect"
   * POSTs /agent/connect. A newer follow() stops this one. */
  async function follow(kind, input) {
    if (current) current.controller.abort();
    const me = { controller: new AbortController() };
    current = me;
    const live = () => current === me;
    let runId = kind === "run" ? input.runId : null; // the run whose events come
    let last = null; // the id of the last event seen
    let retry = RETRY_MS;
    setBusy(true);
    setStatus(kind === "run" ? "streaming" : "connecting");
    if (runId) setRun(runId);
    while (live()) {
      // a run, or a connect that joined a live run, is rejoined after the last id seen;
      // a connect that saw no id yet is sent again
      const rejoin = last !== null && runId !== null;
      const path = rejoin || kind === "run" ? AGENT : `${AGENT}/connect`;
      // a run is re-sent as it was; a joined run is named by a minimal RunAgentInput
      const body = rejoin && kind === "connect" ? { threadId: thread, runId, messages: [] } : input;
      const headers = { "Content-Type": "application/json", Accept: "text/event-stream" };
      if (rejoin) headers["Last-Event-ID"] = last;
      let terminal = null;
      try {
        const res = await fetch(path, {
          method: "POST",
          headers,
          body: JSON.stringify(body),
          signal: me.controller.signal,
          cache: "no-store",
        });
        if (!live()) return;
        if (!res.ok) {
          const detail = await res.json().catch(() => ({}));
          if (res.status === 404 && rejoin) {
            // the run is gone from the log: the thread's checkpoint says what there is
            connect();
            return;
          }
          throw Object.assign(new Error(detail.detail || res.statusText), { fatal: true });
        }
        if (!live()) return;
        setStatus(kind === "connect" && !runId ? "connecting" : "streaming");
        await readEvents(res.body, (id, ev) => {
          if (!live() || terminal) return;
          if (id !== null) {
            last = id;
            setLastEventId(id);
          }
          retry = RETRY_MS;
          if (ev === null) return;
          switch (ev.type) {
            case "RUN_STARTED":
              if (kind === "connect" && !rejoin && ev.runId !== input.runId) {
                runId = ev.runId; // the thread's live run, joined
                setRun(runId);
              }
              break;
            case "MESSAGES_SNAPSHOT":
              onSnapshot(ev, kind === "connect" && !rejoin);
              // the page is ready once drawn; a thread at rest is ready at RUN_FINISHED
              if (kind === "connect" && runId) document.body.dataset.ready = "true";
              break;
            case "TEXT_MESSAGE_START":
              onStart(ev);
              break;
            case "TEXT_MESSAGE_CONTENT":
              onContent(ev);
              break;
            case "TEXT_MESSAGE_END":
              onEnd(ev);
              break;
            case "TEXT_MESSAGE_CHUNK":
              if (ev.messageId && !messages.has(ev.messageId)) onStart(ev);
              onContent(ev);
              break;
            case "RUN_FINISHED":
            case "RUN_ERROR":
              terminal = ev;
              break;
            default: // steps, state snapshots, tool calls: nothing to draw
              break;
          }
        });
      } catch (err) {
        if (!live()) return;
        if (err.fatal) {
          finish({ type: "RUN_ERROR", message: err.message });
          return;
        }
        // the connection broke: reconnect below
      }
      if (!live()) return;
      if (terminal) {
        const trimmed = terminal.type === "RUN_ERROR" && terminal.code === "EventsTrimmed";
        if (trimmed && (rejoin || kind === "run")) {
          // the log no longer holds where we were: start over from the checkpoint (a connect
          // that gets EventsTrimmed itself ends with the error, not in a loop)
          connect();
          return;
        }
        finish(terminal);
        return;
      }
      setStatus("reconnecting");
      await sleep(retry);
      retry = Math.min(retry * 2, MAX_RETRY_MS);
    }
  }

  function finish(ev) {
    current = null;
    setRun(null);
    document.body.dataset.ready = "true";
    if (ev.type === "RUN_ERROR") {
      setBusy(false);
      setStatus("error", `error: ${ev.message || ev.code || "the run failed"}`);
      return;
    }
    const interrupts = (ev.outcome && ev.outcome.type === "interrupt" && ev.outcome.interrupts) || [];
    if (interrupts.length) {
      showApproval(interrupts);
      setStatus("waiting", "waiting for approval");
    } else {
      hideApproval();
      setBusy(false);
      setStatus(messages.size ? "done" : "idle");
    }
  }

  function connect() {
    follow("connect", { threadId: thread, runId: newId("connect"), messages: [] }).catch((err) =>
      setStatus("error", `error: ${err}`),
    );
  }

  function run(extra) {
    const input = { threadId: thread, runId: newId("run"), messages: [], ...extra };
    follow("run", input).catch((err) => setStatus("error", `error: ${err}`));
  }

  // -- the controls --------------------------------------------------------------------

  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = $("message");
    const text = input.value.trim();
    if (!text || $("send").disabled) return;
    input.value = "";
    const id = newId("user");
    const m = addMessage("user", text, id, true);
    m.streamed = true; // drawn here; the snapshots compare it
    run({ messages: [{ id, role: "user", content: text }] });
  });

  for (const [id, decision] of [["approve", true], ["decline", false]]) {
    $(id).addEventListener("click", () => {
      $("approve").disabled = true;
      $("decline").disabled = true;
      const resume = pending.map((i) => ({ interruptId: i.id, status: "resolved", payload: decision }));
      hideApproval();
      run({ resume });
    });
  }

  $("new-chat").addEventListener("click", () => {
    if (current) current.controller.abort();
    current = null;
    for (const key of Object.values(KEY)) sessionStorage.removeItem(key);
    start();
  });

  function start() {
    thread = sessionStorage.getItem(KEY.thread);
    if (!thread) {
      thread = newId("thread");
      sessionStorage.setItem(KEY.thread, thread);
    }
    $("thread-id").textContent = thread;
    $("run-id").textContent = sessionStorage.getItem(KEY.run) || "–";
    $("last-event-id").textContent = sessionStorage.getItem(KEY.last) || "–";
    delete document.body.dataset.ready;
    clearTranscript();
    hideApproval();
    setStatus("idle");
    connect();
  }

  start();
})();
