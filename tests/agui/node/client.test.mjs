// The official AG-UI client (@ag-ui/client's HttpAgent, pinned in package-lock.json) against a
// graphkeep.agui endpoint serving tests/agui/graph.py's graph. tests/test_agui_client.py starts
// the server on each backend and runs this file with:
//
//   AGUI_URL       the endpoint, e.g. http://127.0.0.1:PORT/agent
//   AGUI_EXPECTED  JSON of the prompts and the graph's exact replies (from tests/agui/graph.py)
//
// The client validates every event itself (enforceEvents + verifyEvents run inside runAgent and
// connectAgent: an invalid event or sequence rejects the run); on top of that, any warning the
// client prints ("[ag-ui]…": a field it had to strip, an event it dropped) fails the test.

import { after, afterEach, beforeEach, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

const URL_ = process.env.AGUI_URL;
if (!URL_ || !process.env.AGUI_EXPECTED) {
  throw new Error("set AGUI_URL and AGUI_EXPECTED (tests/test_agui_client.py does)");
}
const EXPECTED = JSON.parse(process.env.AGUI_EXPECTED);
// text deltas after which a run's connection is cut (the reply has ~30)
const CUT_AFTER = 5;

// ---------------------------------------------------------------------------- helpers

const complaints = [];
const realWarn = console.warn;
const realError = console.error;
beforeEach(() => {
  complaints.length = 0;
  console.warn = (...args) => {
    complaints.push(["warn", ...args].map(String).join(" "));
    realWarn(...args);
  };
  console.error = (...args) => {
    complaints.push(["error", ...args].map(String).join(" "));
    realError(...args);
  };
});
afterEach(() => {
  console.warn = realWarn;
  console.error = realError;
});
after(() => {
  console.warn = realWarn;
  console.error = realError;
});

function assertClientQuiet() {
  assert.deepEqual(complaints, [], "the client complained about the server's events");
}

/** A page load: HttpAgent has no connect(); this is the official HTTP pipeline on /connect. */
class ConnectingAgent extends HttpAgent {
  connect(input) {
    return transformHttpEventStream(
      runHttpRequest(() => this.fetch(this.url + "/connect", this.requestInit(input))),
      this.debugLogger,
    );
  }
}

/**
 * A fetch that hands the client the response body read by read, and records every complete SSE
 * frame (its `id:` and event type) in what the client has been given: `lastId` is the id of the
 * last event the client received, as a browser's EventSource would keep it.
 */
function recordingFetch() {
  const connections = [];
  const fetchFn = async (url, init) => {
    const response = await fetch(url, init);
    if (!response.ok || !response.body) return response;
    const frames = [];
    connections.push({ url, frames });
    const source = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    const body = new ReadableStream(
      {
        async pull(controller) {
          const { done, value } = await source.read(); // an abort rejects: the body errors
          if (done) {
            controller.close();
            return;
          }
          buffer += decoder.decode(value, { stream: true });
          const parts = buffer.split("\n\n");
          buffer = parts.pop();
          for (const part of parts) {
            let id = null;
            let data = null;
            for (const line of part.split("\n")) {
              if (line.startsWith("id:")) id = line.slice(3).replace(/^ /, "");
              else if (line.startsWith("data:")) data = JSON.parse(line.slice(5));
            }
            if (data !== null) frames.push({ id, type: data.type });
          }
          controller.enqueue(value);
        },
        cancel(reason) {
          return source.cancel(reason);
        },
      },
      { highWaterMark: 0 },
    );
    return new Response(body, {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
  const lastId = () => {
    const ids = connections.flatMap((c) => c.frames.map((f) => f.id)).filter((id) => id !== null);
    return ids.at(-1) ?? null;
  };
  return { fetch: fetchFn, connections, lastId };
}

function agent({ threadId = randomUUID(), prompt, fetch, Agent = HttpAgent } = {}) {
  return new Agent({
    url: URL_,
    threadId,
    initialMessages: prompt === undefined ? [] : [{ id: randomUUID(), role: "user", content: prompt }],
    ...(fetch && { fetch }),
  });
}

/** The messages as role + text (+ tool calls, tool call id): what a chat page shows. */
function transcript(messages) {
  return messages.map((m) => {
    const row = { role: m.role, content: m.content ?? "" };
    if (m.toolCalls?.length) {
      row.toolCalls = m.toolCalls.map((c) => ({
        id: c.id,
        name: c.function.name,
        arguments: JSON.parse(c.function.arguments),
      }));
    }
    if (m.toolCallId !== undefined) row.toolCallId = m.toolCallId;
    return row;
  });
}

/** Counts events by type (a subscriber), and keeps the RUN_STARTED/RUN_FINISHED seen. */
function counter(extra = {}) {
  const counts = {};
  const runs = [];
  const finished = [];
  return {
    counts,
    runs,
    finished,
    subscriber: {
      onEvent({ event }) {
        counts[event.type] = (counts[event.type] ?? 0) + 1;
      },
      onRunStartedEvent({ event }) {
        runs.push(event.runId);
      },
      onRunFinishedEvent(params) {
        finished.push({ outcome: params.outcome, interrupts: params.interrupts });
      },
      ...extra,
    },
  };
}

// ---------------------------------------------------------------------------- scenarios

test("text streams word by word into the exact reply", async () => {
  const { prompt, reply } = EXPECTED.text;
  const chat = agent({ prompt });
  const seen = counter();
  const result = await chat.runAgent({}, seen.subscriber);

  assert.ok(seen.counts.TEXT_MESSAGE_CONTENT > 5, JSON.stringify(seen.counts));
  assert.equal(seen.counts.RUN_STARTED, 1);
  assert.equal(seen.counts.RUN_FINISHED, 1);
  assert.deepEqual(seen.finished.map((f) => f.outcome), ["success"]);
  assert.deepEqual(transcript(chat.messages), [
    { role: "user", content: prompt },
    { role: "assistant", content: reply },
  ]);
  assert.deepEqual(transcript(result.newMessages), [{ role: "assistant", content: reply }]);
  assertClientQuiet();
});

test("a tool call: get_weather(Paris), its result, then the reply quoting it", async () => {
  const { prompt, lookup, callId, city, forecast, reply } = EXPECTED.weather;
  const chat = agent({ prompt });
  const seen = counter();
  await chat.runAgent({}, seen.subscriber);

  assert.deepEqual(transcript(chat.messages), [
    { role: "user", content: prompt },
    {
      role: "assistant",
      content: lookup,
      toolCalls: [{ id: callId, name: "get_weather", arguments: { city } }],
    },
    { role: "tool", content: forecast, toolCallId: callId },
    { role: "assistant", content: reply },
  ]);
  const call = chat.messages[1].toolCalls[0];
  assert.equal(call.function.name, "get_weather");
  assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });
  assert.equal(seen.counts.TOOL_CALL_START, 1);
  assert.equal(seen.counts.TOOL_CALL_END, 1);
  assert.deepEqual(seen.finished.map((f) => f.outcome), ["success"]);
  assertClientQuiet();
});

test("an interrupt ends the run; a resume answering it continues the thread", async () => {
  const { prompt, first, approved } = EXPECTED.refund;
  const chat = agent({ prompt });
  const seen = counter();
  await chat.runAgent({}, seen.subscriber);

  assert.deepEqual(seen.finished.map((f) => f.outcome), ["interrupt"]);
  assert.equal(chat.pendingInterrupts.length, 1, JSON.stringify(chat.pendingInterrupts));
  const [pending] = chat.pendingInterrupts;
  assert.equal(typeof pending.id, "string");
  assert.deepEqual(seen.finished[0].interrupts.map((i) => i.id), [pending.id]);
  assert.deepEqual(transcript(chat.messages), [
    { role: "user", content: prompt },
    { role: "assistant", content: first },
  ]);

  // a page load now: the checkpoint's messages and the interrupt still waiting
  const page = agent({ threadId: chat.threadId, Agent: ConnectingAgent });
  await page.connectAgent();
  assert.deepEqual(page.pendingInterrupts.map((i) => i.id), [pending.id]);
  assert.deepEqual(page.messages, chat.messages);

  const resumed = counter();
  await chat.runAgent(
    { resume: [{ interruptId: pending.id, status: "resolved", payload: true }] },
    resumed.subscriber,
  );
  assert.deepEqual(resumed.finished.map((f) => f.outcome), ["success"]);
  assert.deepEqual(chat.pendingInterrupts, []);
  assert.deepEqual(transcript(chat.messages), [
    { role: "user", content: prompt },
    { role: "assistant", content: first },
    { role: "assistant", content: approved },
  ]);
  assert.equal(chat.messages.at(-1).content, approved);
  assertClientQuiet();
});

test("a connection cut mid-run, then rejoined after Last-Event-ID: every word exactly once", async () => {
  const { prompt, reply } = EXPECTED.text;
  const wire = recordingFetch();
  const chat = agent({ prompt, fetch: wire.fetch });
  const runId = randomUUID();
  let deltas = 0;
  await chat.runAgent(
    { runId },
    {
      onTextMessageContentEvent() {
        deltas += 1;
        if (deltas === CUT_AFTER) chat.abortRun();
      },
    },
  );
  const partial = chat.messages.filter((m) => m.role === "assistant");
  assert.equal(partial.length, 1, JSON.stringify(chat.messages));
  const cutText = partial[0].content;
  assert.ok(cutText.length > 0 && cutText.length < reply.length, `cut at ${JSON.stringify(cutText)}`);
  assert.ok(reply.startsWith(cutText), `${JSON.stringify(cutText)} is not how the reply starts`);
  const lastId = wire.lastId();
  assert.notEqual(lastId, null, "the cut connection carried no event id");
  // the worker goes on without a connection: let it write a little more meanwhile
  await new Promise((resolve) => setTimeout(resolve, 100));

  chat.headers = { ...chat.headers, "Last-Event-ID": lastId };
  const seen = counter();
  await chat.runAgent({ runId }, seen.subscriber);
  delete chat.headers["Last-Event-ID"];

  assert.deepEqual(seen.runs, [runId]);
  assert.deepEqual(seen.finished.map((f) => f.outcome), ["success"]);
  assert.deepEqual(transcript(chat.messages), [
    { role: "user", content: prompt },
    { role: "assistant", content: reply },
  ]);
  assert.equal(chat.messages[1].id, partial[0].id);

  // the wire: the two connections' ids, in order, are exactly the run's ids as a late
  // rejoin from the start reads them (none twice, none missing)
  const [cut, rejoined] = wire.connections;
  assert.equal(wire.connections.length, 2);
  assert.equal(rejoined.frames[0].type, "RUN_STARTED");
  assert.equal(rejoined.frames[0].id, null);
  const whole = recordingFetch();
  const late = new HttpAgent({
    url: URL_,
    threadId: chat.threadId,
    initialMessages: [chat.messages[0]],
    fetch: whole.fetch,
  });
  await late.runAgent({ runId });
  assert.deepEqual(transcript(late.messages).at(-1), { role: "assistant", content: reply });
  const ids = (connection) => connection.frames.map((f) => f.id).filter((id) => id !== null);
  assert.deepEqual([...ids(cut), ...ids(rejoined)], ids(whole.connections[0]));
  assertClientQuiet();
});

test("a page load mid-run joins the live run: the same messages, each word once", async () => {
  const { prompt, reply } = EXPECTED.text;
  const chat = agent({ prompt });
  const page = agent({ threadId: chat.threadId, Agent: ConnectingAgent });
  const pageSeen = counter();
  let loading = null;
  let deltas = 0;
  const seen = counter({
    onTextMessageContentEvent() {
      deltas += 1;
      // at the first word: the page must read the checkpoint before the reply is in it
      if (deltas === 1) loading = page.connectAgent({}, pageSeen.subscriber);
    },
  });
  await chat.runAgent({}, seen.subscriber);
  assert.notEqual(loading, null, "the run streamed fewer deltas than expected");
  await loading;

  assert.deepEqual(pageSeen.runs, seen.runs, "the page load did not join the live run");
  assert.ok(pageSeen.counts.TEXT_MESSAGE_CONTENT > 0, JSON.stringify(pageSeen.counts));
  assert.deepEqual(pageSeen.finished.map((f) => f.outcome), ["success"]);
  assert.deepEqual(transcript(chat.messages), [
    { role: "user", content: prompt },
    { role: "assistant", content: reply },
  ]);
  assert.deepEqual(page.messages, chat.messages);
  assertClientQuiet();
});
