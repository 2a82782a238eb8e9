"use strict";
// The resumable chat page: vanilla JS and one EventSource per run.
//
// sessionStorage keeps what a reload needs to carry on:
//   chat.thread       the conversation (LangGraph thread id)
//   chat.run          the run being followed (event log run id), until its close event
//   chat.lastEventId  the id of the last event drawn (EventSource itself sends it as
//                     Last-Event-ID when it reconnects a dropped stream)
// A reload draws the thread's state (messages committed so far, a pending approval), then
// re-reads the current run's events from its start: the in-flight reply is rebuilt token by
// token, and tokens of replies the state already has in full are skipped (by message id).
(() => {
  const KEY = { thread: "chat.thread", run: "chat.run", last: "chat.lastEventId" };
  const $ = (id) => document.getElementById(id);
  const transcript = $("transcript");
  /** message id -> {el, span, text, final} */
  const messages = new Map();
  let thread = null;
  let source = null;

  function newId() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return `t-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
  }

  function setStatus(state, text) {
    const el = $("status");
    el.dataset.state = state;
    el.textContent = text || state;
    document.body.dataset.state = state;
  }

  function setBusy(busy) {
    $("send").disabled = busy;
  }

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
    const entry = { el, span, text, final };
    if (id) messages.set(id, entry);
    return entry;
  }

  function assistantMessage(id) {
    return messages.get(id) || addMessage("assistant", "", id, false);
  }

  function onToken(ev) {
    const m = assistantMessage(ev.message_id);
    if (m.final) return; // complete already (drawn from the thread's state)
    m.text += ev.text;
    m.span.textContent = m.text;
  }

  function onMessages(ev) {
    for (const msg of ev.messages) {
      if (msg.role !== "assistant") continue;
      const m = assistantMessage(msg.id);
      if (m.final) continue;
      if (m.text === "") {
        m.text = msg.content; // a reply that was not streamed
        m.span.textContent = m.text;
      } else if (m.text !== msg.content) {
        // keep what was streamed, so a lost or doubled token stays visible
        console.warn("streamed text differs from the final message", msg.id);
        m.el.dataset.mismatch = "true";
      }
      m.final = true;
      m.el.dataset.final = "true";
    }
  }

  function showApproval(interrupt) {
    const value = interrupt && interrupt.value;
    $("approval-question").textContent =
      value && value.question ? value.question : JSON.stringify(value);
    $("approval").hidden = false;
    setBusy(true); // the thread waits for the decision, not for a new message
    $("approve").disabled = false;
    $("decline").disabled = false;
  }

  function hideApproval() {
    $("approval").hidden = true;
  }

  function stopFollowing() {
    if (source) source.close();
    source = null;
  }

  function finishRun(status, error) {
    stopFollowing();
    sessionStorage.removeItem(KEY.run);
    setBusy(status === "interrupted");
    if (status === "interrupted") setStatus("waiting", "waiting for approval");
    else if (status === "success") setStatus("done");
    else setStatus("error", error ? `error: ${error}` : "error");
  }

  function handle(ev, es) {
    switch (ev.type) {
      case "token":
        onToken(ev);
        break;
      case "message":
        onMessages(ev);
        break;
      case "interrupt":
        if (ev.interrupts.length) showApproval(ev.interrupts[0]);
        break;
      case "close":
        es.close();
        finishRun(ev.status, ev.error);
        break;
      case "error":
        es.close();
        finishRun("error", ev.message);
        break;
      default: // steps without anything to draw
        break;
    }
  }

  function follow(runId) {
    stopFollowing();
    sessionStorage.setItem(KEY.run, runId);
    $("run-id").textContent = runId;
    setBusy(true);
    setStatus("streaming");
    const es = new EventSource(`/runs/${encodeURIComponent(runId)}/events`);
    source = es;
    es.onopen = () => {
      if (es === source) setStatus("streaming");
    };
    es.onmessage = (e) => {
      if (es !== source) return;
      if (e.lastEventId) {
        sessionStorage.setItem(KEY.last, e.lastEventId);
        $("last-event-id").textContent = e.lastEventId;
      }
      handle(JSON.parse(e.data), es);
    };
    es.onerror = () => {
      if (es !== source) return;
      if (es.readyState === EventSource.CLOSED) {
        // 204 (nothing after our last event), 404 (run expired) or a server error: the
        // browser gives up on this stream; the thread's state says what there is
        stopFollowing();
        sessionStorage.removeItem(KEY.run);
        setBusy(false);
        loadState()
          .then((state) => state.interrupt || setStatus("done"))
          .catch((err) => setStatus("error", `error: ${err}`));
      } else {
        setStatus("reconnecting"); // EventSource retries by itself with Last-Event-ID
      }
    };
  }

  async function loadState() {
    const res = await fetch(`/threads/${encodeURIComponent(thread)}/state`);
    const state = await res.json();
    if (!res.ok) throw new Error(state.error || res.statusText);
    transcript.replaceChildren();
    messages.clear();
    for (const m of state.messages) addMessage(m.role, m.content, m.id, true);
    if (state.interrupt) {
      showApproval(state.interrupt);
      setStatus("waiting", "waiting for approval");
    } else {
      hideApproval();
    }
    return state;
  }

  async function startRun(body) {
    setBusy(true);
    const res = await fetch("/runs", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ thread_id: thread, ...body }),
    });
    const data = await res.json();
    if (!res.ok) {
      setBusy(false);
      setStatus("error", `error: ${data.error}`);
      return;
    }
    follow(data.run_id);
  }

  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = $("message");
    const text = input.value.trim();
    if (!text || $("send").disabled) return;
    input.value = "";
    addMessage("user", text, null, true);
    startRun({ message: text }).catch((err) => setStatus("error", `error: ${err}`));
  });

  for (const [id, decision] of [["approve", true], ["decline", false]]) {
    $(id).addEventListener("click", () => {
      $("approve").disabled = true;
      $("decline").disabled = true;
      hideApproval();
      startRun({ resume: decision }).catch((err) => setStatus("error", `error: ${err}`));
    });
  }

  $("new-chat").addEventListener("click", () => {
    stopFollowing();
    for (const key of Object.values(KEY)) sessionStorage.removeItem(key);
    start().catch((err) => setStatus("error", `error: ${err}`));
  });

  async function start() {
    thread = sessionStorage.getItem(KEY.thread);
    if (!thread) {
      thread = newId();
      sessionStorage.setItem(KEY.thread, thread);
    }
    $("thread-id").textContent = thread;
    $("run-id").textContent = sessionStorage.getItem(KEY.run) || "–";
    $("last-event-id").textContent = sessionStorage.getItem(KEY.last) || "–";
    setBusy(false);
    setStatus("idle");
    const state = await loadState();
    // the run this tab followed before a reload, else one another tab started on the thread
    const run = sessionStorage.getItem(KEY.run) || state.running;
    if (run) follow(run);
    document.body.dataset.ready = "true";
  }

  start().catch((err) => setStatus("error", `error: ${err}`));
})();
