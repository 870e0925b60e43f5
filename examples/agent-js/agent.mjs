// A heed agent in Node.js with plain NATS and CloudEvents headers.
//
// Part A: it starts a run of a skill (heed.cmd.run.start), follows the run's
// events, fixes the failed tool step heed hands it (heed.cmd.run.retry),
// answers the confirmation (heed.cmd.run.continue) and checks that the run
// completed and that heed learned the fix.
//
// Part B: it drives a run of its own, publishing the run's events itself
// with JetStream, and checks that heed learned that fix too and dead-lettered
// nothing.
//
// Contract: docs/EVENTS.md, docs/AGENTS.md, docs/SKILLS.md, docs/HEALING.md.
// Exit status 0 when every check passes, 1 when one fails (the message says
// which), 2 on a usage or connection problem.

import { randomBytes } from "node:crypto";
import { connect, headers } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, DeliverPolicy } from "@nats-io/jetstream";

const NATS_URL = process.env.HEED_NATS_URL || "nats://127.0.0.1:4222";
const AGENT = process.env.HEED_AGENT || "agent/js";
const WAIT_MS = Number(process.env.HEED_WAIT_S || 30) * 1000;

const EVENTS_STREAM = "HEED_EVENTS";
const DLQ_STREAM = "HEED_DLQ";

// ---------------------------------------------------------------- logging

const t0 = Date.now();
function log(msg) {
  const s = ((Date.now() - t0) / 1000).toFixed(2).padStart(6);
  console.log(`[${s}s] ${msg}`);
}

class CheckFailed extends Error {}

const passed = [];
function pass(name, detail = "") {
  passed.push(name);
  log(`  ✔ check passed: ${name}${detail ? ` (${detail})` : ""}`);
}
function fail(name, why) {
  throw new CheckFailed(`check failed: ${name}: ${why}`);
}

// ------------------------------------------------------- CloudEvents on NATS

// Header values are percent-encoded where the binding requires it (EVENTS.md,
// "Wire format"): space, '"', '%' and bytes outside printable ASCII.
function pctEncode(v) {
  let out = "";
  for (const b of Buffer.from(String(v), "utf8")) {
    if (b <= 0x20 || b >= 0x7f || b === 0x22 || b === 0x25) {
      out += "%" + b.toString(16).toUpperCase().padStart(2, "0");
    } else {
      out += String.fromCharCode(b);
    }
  }
  return out;
}
function pctDecode(v) {
  try {
    return decodeURIComponent(v);
  } catch {
    return v;
  }
}

// decode turns a JetStream message into a CloudEvent: the ce-* headers
// (names lower-cased, values percent-decoded) and the JSON payload as data.
function decode(m) {
  const ce = {};
  if (m.headers) {
    for (const [k, vs] of m.headers) {
      const key = k.toLowerCase();
      if (key.startsWith("ce-")) ce[key.slice(3)] = pctDecode(vs[0]);
    }
  }
  let data = null;
  if (m.data && m.data.length > 0) {
    try {
      data = JSON.parse(new TextDecoder().decode(m.data));
    } catch {
      data = { _undecodable: new TextDecoder().decode(m.data) };
    }
  }
  return {
    seq: m.seq,
    natsSubject: m.subject,
    id: ce.id,
    type: ce.type,
    source: ce.source,
    subject: ce.subject,
    time: ce.time,
    ce,
    data,
  };
}

// cloudEventHeaders builds the binary-mode headers of one event, with
// Nats-Msg-Id = ce-id so a republish is dropped by JetStream.
function cloudEventHeaders({ id, type, source, subject, causationid }) {
  const h = headers();
  h.set("ce-specversion", "1.0");
  h.set("ce-id", pctEncode(id));
  h.set("ce-source", pctEncode(source));
  h.set("ce-type", type);
  h.set("ce-subject", pctEncode(subject));
  h.set("ce-time", new Date().toISOString());
  h.set("ce-datacontenttype", "application/json");
  if (causationid) h.set("ce-causationid", pctEncode(causationid));
  h.set("Nats-Msg-Id", id);
  return h;
}

// ------------------------------------------------------------ following

// A Follower reads a filtered view of HEED_EVENTS with an ordered consumer
// (from the start of the stream, so nothing is missed however late it
// starts) and lets the agent wait for an event matching a predicate.
class Follower {
  constructor(js, label, filters, { quiet = false } = {}) {
    this.js = js;
    this.label = label;
    this.filters = filters;
    this.quiet = quiet;
    this.events = [];
    this.waiters = new Set();
  }

  async start() {
    const consumer = await this.js.consumers.get(EVENTS_STREAM, {
      filter_subjects: this.filters,
      deliver_policy: DeliverPolicy.All,
    });
    this.messages = await consumer.consume();
    this.done = (async () => {
      for await (const m of this.messages) {
        const ev = decode(m);
        this.events.push(ev);
        if (!this.quiet) log(`  ${this.label} ← ${describe(ev)}`);
        for (const w of [...this.waiters]) {
          if (w.test(ev)) {
            this.waiters.delete(w);
            w.resolve(ev);
          }
        }
      }
    })().catch((err) => {
      for (const w of this.waiters) w.reject(err);
    });
    return this;
  }

  // waitFor resolves with the first event (already seen or to come) for
  // which test(ev) is true; it rejects after ms with a message naming what.
  // An event matching failFast(ev) ends the wait at once with an error.
  waitFor(what, test, { ms = WAIT_MS, failFast } = {}) {
    const isMatch = (ev) => {
      if (failFast) {
        const why = failFast(ev);
        if (why) return { bad: why };
      }
      return test(ev) ? { ok: true } : null;
    };
    for (const ev of this.events) {
      const r = isMatch(ev);
      if (r?.bad) return Promise.reject(new CheckFailed(`${what}: ${r.bad}`));
      if (r) return Promise.resolve(ev);
    }
    return new Promise((resolve, reject) => {
      const w = {
        test: (ev) => {
          const r = isMatch(ev);
          if (r?.bad) {
            clearTimeout(timer);
            this.waiters.delete(w);
            reject(new CheckFailed(`${what}: ${r.bad}`));
            return false;
          }
          return !!r;
        },
        resolve: (ev) => {
          clearTimeout(timer);
          resolve(ev);
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      const timer = setTimeout(() => {
        this.waiters.delete(w);
        reject(
          new CheckFailed(
            `timed out after ${ms / 1000}s waiting for ${what} (saw ${this.events.length} events on ${this.filters.join(", ")}: ${
              this.events.map((e) => e.type).join(", ") || "none"
            })`,
          ),
        );
      }, ms);
      this.waiters.add(w);
    });
  }

  async stop() {
    await this.messages?.close();
    await this.done;
  }
}

function short(v, n = 100) {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s && s.length > n ? s.slice(0, n - 1) + "…" : s;
}

// describe renders one event on one line, with the data that matters.
function describe(ev) {
  const d = ev.data || {};
  const t = (ev.type || "?").replace(/^heed\./, "");
  const parts = [`#${ev.seq} ${t}`];
  switch (ev.type) {
    case "heed.run.requested":
      parts.push(`skill=${d.skill?.name} inputs=${short(d.inputs, 60)} requested_by=${d.requested_by}${d.agent ? ` agent=${d.agent}` : ""}`);
      break;
    case "heed.run.started":
      parts.push(`skill=${d.skill} driver=${d.driver}${d.agent ? ` agent=${d.agent}` : ""}`);
      if (d.known_issues?.length) parts.push(`known_issues=${d.known_issues.length}`);
      break;
    case "heed.run.step.started":
      parts.push(`step=${d.step} attempt=${d.attempt} kind=${d.kind}`);
      if (d.args) parts.push(`args=${short(d.args, 80)}`);
      if (d.retry_of) parts.push(`retry_of=${d.retry_of}`);
      break;
    case "heed.run.step.failed":
      parts.push(`step=${d.step} attempt=${d.attempt} error=${short(d.error?.message, 80)}`);
      break;
    case "heed.run.step.completed":
      parts.push(`step=${d.step} attempt=${d.attempt}`);
      if (d.output !== undefined) parts.push(`output=${short(d.output, 70)}`);
      break;
    case "heed.run.paused":
      parts.push(`reason=${d.reason} step=${d.step}${d.confirm_id ? ` confirm_id=${d.confirm_id}` : ""}`);
      break;
    case "heed.run.heal.triggered":
      parts.push(`step=${d.step} attempt=${d.attempt} classification=${short(d.classification?.kind ?? d.classification, 40)} plan=${short(d.plan, 40)}`);
      break;
    case "heed.run.heal.gave_up":
      parts.push(`step=${d.step} reason=${short(d.reason, 80)}`);
      break;
    case "heed.run.resumed":
      parts.push(`step=${d.step}${d.choice ? ` choice=${d.choice}` : ""} method=${d.method} by=${d.by}`);
      break;
    case "heed.run.heal.escalated":
      parts.push(`step=${d.step} attempt=${d.attempt} agent=${d.agent}`);
      break;
    case "heed.run.heal.healed":
      parts.push(`step=${d.step} attempt=${d.attempt} via=${d.via}${d.fix_id ? ` fix_id=${d.fix_id}` : ""}`);
      break;
    case "heed.run.completed":
      if (d.summary) parts.push(`summary=${short(d.summary.trim(), 90)}`);
      break;
    case "heed.fix.learned":
      parts.push(`fix=${ev.subject} tool=${d.tool} pattern=${short(d.error_pattern, 60)} run_id=${d.run_id}`);
      break;
    default:
      if (Object.keys(d).length) parts.push(short(d, 110));
  }
  return parts.join(" ");
}

// ----------------------------------------------------------- commands

// command sends a request/reply command on heed.cmd.<...> with a JSON body.
// A failed command has the micro error headers (Nats-Service-Error-Code,
// Nats-Service-Error) and a JSON body {code, message, answer}.
async function command(nc, subject, body) {
  log(`→ ${subject} ${short(body, 160)}`);
  let reply;
  try {
    reply = await nc.request(subject, JSON.stringify(body), { timeout: 10_000 });
  } catch (err) {
    throw new CheckFailed(`${subject}: no reply: ${err.message}`);
  }
  const text = reply.string();
  const code = reply.headers?.get("Nats-Service-Error-Code");
  if (code) {
    throw new CheckFailed(
      `${subject} refused: code=${code} error=${reply.headers.get("Nats-Service-Error")} body=${text}`,
    );
  }
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    throw new CheckFailed(`${subject}: reply is not JSON: ${short(text, 200)}`);
  }
  log(`← ${subject} reply ${short(json, 160)}`);
  return json;
}

// ---------------------------------------------------------------- helpers

const hex = (n) => randomBytes(Math.ceil(n / 2)).toString("hex").slice(0, n);
const isFullSha = (s) => /^[0-9a-f]{40}$/.test(s);

function runEnded(runId) {
  return (ev) => {
    if (ev.type === "heed.run.failed") return `run ${runId} failed: ${short(ev.data, 300)}`;
    if (ev.type === "heed.run.cancelled") return `run ${runId} was cancelled: ${short(ev.data, 300)}`;
    return null;
  };
}

// ------------------------------------------------------------ part A

// The skill: a tool step that fails on its first args (quay_check only
// knows full 40-character SHAs, the input is a short one), then a confirm
// step handed to the run's agent (ai_assist).
const SKILL = `name: agent_js_release
description: Check an image, then ask before releasing it (example of the Node.js agent).
inputs:
  commit_sha: {type: string, required: true, description: the commit to release}
steps:
  - name: check_image
    tool: quay_check
    args:
      tag: "{{ inputs.commit_sha }}"
    output: image
  - name: confirm_release
    confirm:
      title: Release {{ image.image }}
      message: |
        Release {{ image.image }} ({{ image.digest }})?
      options:
        - {label: Proceed, value: proceed, description: release it}
        - {label: Cancel, value: cancel, description: stop here}
      timeout: 300
      default: cancel
      ai_assist: true
    output: decision
summary: |
  Released {{ image.image }} ({{ decision }}).
`;

async function partA(nc, js, fullSha) {
  const shortSha = fullSha.slice(0, 7);
  log(`== Part A: a run heed drives, with agent ${AGENT}`);
  log(`commit: ${fullSha} (the run is started with the short ${shortSha}, which quay_check does not know)`);

  // heed.fix.*.learned events are followed from the start of the log and
  // matched by run id, so starting this before the run misses nothing.
  const fixes = await new Follower(js, "fix", ["heed.fix.*.learned"], { quiet: true }).start();

  const started = await command(nc, "heed.cmd.run.start", {
    skill: { source: SKILL, file: "agent-js/agent_js_release.yaml" },
    inputs: { commit_sha: shortSha },
    agent: AGENT,
    requested_by: AGENT,
    request_id: `agent-js-${fullSha}`,
  });
  const runId = started.run_id;
  if (!runId) fail("run.start reply", `no run_id in ${JSON.stringify(started)}`);
  pass("run started", `run_id=${runId} status=${started.status}`);

  const run = await new Follower(js, "run", [`heed.run.${runId}.>`]).start();
  const ended = runEnded(runId);
  try {
    // 1. The tool step fails; the healer hands it to us.
    const failed = await run.waitFor(
      "heed.run.<id>.step.failed of check_image",
      (ev) => ev.type === "heed.run.step.failed" && ev.data?.step === "check_image",
      { failFast: ended },
    );
    log(`quay_check failed as expected: ${failed.data.error?.message}`);

    const escalated = await run.waitFor(
      "heed.run.<id>.heal.escalated (the healer hands the failure to the agent)",
      (ev) => ev.type === "heed.run.heal.escalated",
      { failFast: (ev) => ended(ev) || (ev.type === "heed.run.heal.gave_up" ? `the healer gave up: ${short(ev.data, 300)}` : null) },
    );
    if (escalated.data.agent !== AGENT) fail("heal.escalated names the agent", `agent=${escalated.data.agent}, want ${AGENT}`);
    pass("failure escalated to the agent", `step=${escalated.data.step} attempt=${escalated.data.attempt}`);
    const ctx = escalated.data.context || {};
    log(`escalation context: ${short(ctx, 300)}`);

    await run.waitFor(
      "heed.run.<id>.paused with reason awaiting_agent",
      (ev) => ev.type === "heed.run.paused" && ev.data?.reason === "awaiting_agent",
      { failFast: ended },
    );
    pass("run paused awaiting the agent");

    // 2. Corrected retry: the registry only knows full SHAs.
    const failedTag = ctx.args?.tag ?? failed.data.args?.tag;
    log(`diagnosis: tag ${JSON.stringify(failedTag)} is not a full SHA; retrying with ${fullSha}`);
    const retried = await command(nc, "heed.cmd.run.retry", {
      run_id: runId,
      step: escalated.data.step,
      args: { tag: fullSha },
      reason: "the registry only knows full 40-character commit SHAs",
      by: AGENT,
    });
    if (retried.run_id !== runId) fail("run.retry reply", `run_id ${retried.run_id}, want ${runId}`);

    const attempt2 = await run.waitFor(
      "heed.run.<id>.step.started of check_image attempt 2",
      (ev) => ev.type === "heed.run.step.started" && ev.data?.step === "check_image" && ev.data?.attempt === 2,
      { failFast: ended },
    );
    if (attempt2.data.args?.tag !== fullSha) fail("retry args", `attempt 2 tag=${attempt2.data.args?.tag}, want ${fullSha}`);
    if (attempt2.data.retry_of !== failed.id)
      fail("retry_of names the failed attempt", `retry_of=${attempt2.data.retry_of}, want the step.failed id ${failed.id}`);
    pass("corrected retry started", `retry_of=${attempt2.data.retry_of}`);

    await run.waitFor(
      "heed.run.<id>.step.completed of check_image attempt 2",
      (ev) => ev.type === "heed.run.step.completed" && ev.data?.step === "check_image" && ev.data?.attempt === 2,
      { failFast: ended },
    );
    pass("check_image succeeded on attempt 2");

    // 3. The confirmation is the agent's to answer.
    const paused = await run.waitFor(
      "heed.run.<id>.paused with reason awaiting_confirmation",
      (ev) => ev.type === "heed.run.paused" && ev.data?.reason === "awaiting_confirmation",
      { failFast: ended },
    );
    log(`heed asks: ${short(paused.data.message?.trim() ?? "(no message)", 200)}`);
    const cont = await command(nc, "heed.cmd.run.continue", {
      run_id: runId,
      choice: "proceed",
      reason: `image ${fullSha.slice(0, 12)} exists in the registry and the check passed`,
      by: AGENT,
    });
    if (paused.data.confirm_id && cont.confirm_id !== paused.data.confirm_id)
      fail("run.continue answers the pending confirmation", `confirm_id ${cont.confirm_id}, want ${paused.data.confirm_id}`);
    pass("confirmation answered", `confirm_id=${cont.confirm_id} status=${cont.status}`);

    const resumed = await run.waitFor(
      "heed.run.<id>.resumed at confirm_release",
      (ev) => ev.type === "heed.run.resumed" && ev.data?.step === "confirm_release",
      { failFast: ended },
    );
    if (resumed.data.choice !== "proceed" || resumed.data.method !== "agent" || resumed.data.by !== AGENT)
      fail("the agent's answer took effect", `run resumed with ${short(resumed.data, 200)}`);
    pass("the agent's answer took effect", `choice=${resumed.data.choice} method=${resumed.data.method} by=${resumed.data.by}`);

    // 4. The outcome.
    const completed = await run.waitFor(
      "heed.run.<id>.completed",
      (ev) => ev.type === "heed.run.completed",
      { failFast: ended },
    );
    pass("run completed", short(completed.data?.summary?.trim() ?? "", 120));

    const healed = await run.waitFor(
      "heed.run.<id>.heal.healed",
      (ev) => ev.type === "heed.run.heal.healed",
    );
    if (healed.data.via !== "agent") fail("heal.healed via agent", `via=${healed.data.via}`);
    pass("heed recorded the heal", `via=${healed.data.via} step=${healed.data.step} attempt=${healed.data.attempt}`);

    const learned = await fixes.waitFor(
      `heed.fix.<fix-id>.learned for quay_check from run ${runId}`,
      (ev) => ev.type === "heed.fix.learned" && ev.data?.tool === "quay_check" && ev.data?.run_id === runId,
    );
    log(`  fix ← ${describe(learned)}`);
    checkLearned(learned, shortSha, fullSha);
    pass("heed learned the fix", `${learned.subject}: ${short(learned.data.description, 100)}`);
    return runId;
  } finally {
    await run.stop();
    await fixes.stop();
  }
}

function checkLearned(learned, shortSha, fullSha) {
  const d = learned.data;
  if (d.args_patch?.tag === undefined) fail("fix.learned args_patch", `no tag in args_patch ${JSON.stringify(d.args_patch)}`);
  if (d.args_patch.tag !== fullSha) log(`note: args_patch.tag is ${JSON.stringify(d.args_patch.tag)} (a template?)`);
  if (d.when_was && d.when_was.tag !== shortSha)
    fail("fix.learned when_was", `when_was.tag=${JSON.stringify(d.when_was.tag)}, want ${shortSha}`);
}

// ------------------------------------------------------------ part B

async function partB(nc, js, jsm, fullSha) {
  const shortSha = fullSha.slice(0, 7);
  const runId = `agent-js-${hex(12)}`;
  const source = AGENT;
  log(`== Part B: a run the agent drives itself, run id ${runId}`);

  const fixes = await new Follower(js, "fix", ["heed.fix.*.learned"], { quiet: true }).start();
  const run = await new Follower(js, "run", [`heed.run.${runId}.>`]).start();

  let lastSeq = 0;
  const publish = async (verb, id, data, causationid) => {
    const type = `heed.run.${verb}`;
    const subject = `heed.run.${runId}.${verb}`;
    const h = cloudEventHeaders({ id, type, source, subject: runId, causationid });
    const ack = await js.publish(subject, JSON.stringify(data), { headers: h, msgID: id });
    if (ack.duplicate) fail(`publish ${type}`, `JetStream saw ${id} as a duplicate`);
    lastSeq = Math.max(lastSeq, ack.seq);
    log(`→ published ${subject} ce-id=${id} seq=${ack.seq} ${short(data, 110)}`);
    return id;
  };

  const tool = "quay_check";
  const step = "check_image";
  const firstArgs = { tag: shortSha };
  const fixedArgs = { tag: fullSha };
  const errMsg = `manifest unknown: quay.io/app-sre/backend:${shortSha}`;

  try {
    const startedId = await publish("started", `${runId}-started`, {
      skill: "agent_js_deploy",
      driver: "agent",
      agent: AGENT,
      inputs: { commit_sha: shortSha },
      steps: [step],
    });
    const s1 = await publish(
      "step.started",
      `${runId}-0-1-started`,
      { step, index: 0, attempt: 1, kind: "tool", tool, args: firstArgs },
      startedId,
    );
    const failedId = await publish(
      "step.failed",
      `${runId}-0-1-failed`,
      { step, index: 0, attempt: 1, tool, args: firstArgs, error: { message: errMsg, kind: "exit", exit_code: 1 } },
      s1,
    );
    // The agent's own correction: attempt 2 names the attempt it retries.
    const s2 = await publish(
      "step.started",
      `${runId}-0-2-started`,
      { step, index: 0, attempt: 2, kind: "tool", tool, args: fixedArgs, retry_of: failedId },
      failedId,
    );
    const c2 = await publish(
      "step.completed",
      `${runId}-0-2-completed`,
      { step, index: 0, attempt: 2, output: { exists: true, image: `quay.io/app-sre/backend:${fullSha}` } },
      s2,
    );
    await publish("completed", `${runId}-completed`, { summary: `checked quay.io/app-sre/backend:${fullSha}` }, c2);
    pass("own run published", `6 events, last seq ${lastSeq}`);

    // Every event is in the log as published.
    await run.waitFor("own heed.run.<id>.completed in the log", (ev) => ev.type === "heed.run.completed");

    const learned = await fixes.waitFor(
      `heed.fix.<fix-id>.learned whose data.run_id is ${runId}`,
      (ev) => ev.type === "heed.fix.learned" && ev.data?.run_id === runId,
    );
    log(`  fix ← ${describe(learned)}`);
    if (learned.data.tool !== tool) fail("fix.learned tool", `tool=${learned.data.tool}, want ${tool}`);
    checkLearned(learned, shortSha, fullSha);
    pass("heed learned the fix from the agent's own run", `${learned.subject}`);

    // Nothing was dead-lettered. Dead letters are written by heed's
    // consumers as they read the log, so first wait until the index has
    // read the whole run (heed_index run.<id>: status completed), then until
    // every durable consumer of HEED_EVENTS has acknowledged past the last
    // event, then look at HEED_DLQ.
    await waitIndexed(jsm, runId, lastSeq);
    await waitConsumersPast(jsm, lastSeq);
    await checkNoDeadLetters(jsm, runId);
  } finally {
    await run.stop();
    await fixes.stop();
  }
  return runId;
}

// waitIndexed reads heed_index run.<id> (a KV bucket: the stream
// KV_heed_index, subject $KV.heed_index.<key>; plain JetStream reads it).
async function waitIndexed(jsm, runId, lastSeq) {
  const key = `run.${runId}`;
  const deadline = Date.now() + WAIT_MS;
  let last = null;
  while (Date.now() < deadline) {
    const m = await jsm.streams
      .getMessage("KV_heed_index", { last_by_subj: `$KV.heed_index.${key}` })
      .catch(() => null);
    if (m && m.data.length > 0) {
      last = m.json();
      if (last?.value?.status === "completed" && (last.seq ?? 0) >= lastSeq) {
        pass("heed indexed the own run", `heed_index ${key}: status=${last.value.status} seq=${last.seq}`);
        return;
      }
    }
    await sleep(200);
  }
  fail("heed indexed the own run", `heed_index ${key} after ${WAIT_MS / 1000}s: ${JSON.stringify(last)}`);
}

async function waitConsumersPast(jsm, lastSeq) {
  const deadline = Date.now() + WAIT_MS;
  let behind = [];
  while (Date.now() < deadline) {
    behind = [];
    for await (const ci of jsm.consumers.list(EVENTS_STREAM)) {
      if (!ci.config.durable_name) continue;
      const caughtUp = ci.num_pending === 0 && ci.num_ack_pending === 0;
      if (!caughtUp && (ci.ack_floor?.stream_seq ?? 0) < lastSeq) behind.push(ci.name);
    }
    if (behind.length === 0) {
      log(`every durable consumer of ${EVENTS_STREAM} has read past seq ${lastSeq}`);
      return;
    }
    await sleep(200);
  }
  fail("heed's consumers read the own run", `still behind after ${WAIT_MS / 1000}s: ${behind.join(", ")}`);
}

async function checkNoDeadLetters(jsm, runId) {
  const filter = `heed.dlq.run.${runId}.>`;
  const info = await jsm.streams.info(DLQ_STREAM, { subjects_filter: filter });
  const subjects = info.state.subjects || {};
  const n = Object.values(subjects).reduce((a, b) => a + b, 0);
  if (n > 0) {
    const reasons = [];
    for (const subj of Object.keys(subjects)) {
      const m = await jsm.streams.getMessage(DLQ_STREAM, { last_by_subj: subj });
      reasons.push(`${subj}: ${m.header.get("Heed-Dlq-Code")}: ${m.header.get("Heed-Dlq-Reason")}`);
    }
    fail("nothing dead-lettered", `${n} dead letters on ${filter}: ${reasons.join("; ")}`);
  }
  pass("nothing dead-lettered", `no message on ${filter} in ${DLQ_STREAM}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- main

async function main() {
  log(`connecting to ${NATS_URL} as ${AGENT}`);
  let nc;
  try {
    nc = await connect({ servers: NATS_URL, name: AGENT, timeout: 5000 });
  } catch (err) {
    console.error(`cannot connect to ${NATS_URL}: ${err.message} (is \`heed up\` running? set HEED_NATS_URL)`);
    return 2;
  }
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  try {
    await jsm.streams.info(EVENTS_STREAM);
  } catch (err) {
    console.error(`stream ${EVENTS_STREAM} not found on ${NATS_URL}: ${err.message} (is heed up?)`);
    await nc.close();
    return 2;
  }

  let code = 0;
  try {
    const runA = await partA(nc, js, hex(40));
    const runB = await partB(nc, js, jsm, hex(40));
    log(`== all ${passed.length} checks passed (runs ${runA} and ${runB}; see \`heed audit <run-id>\`)`);
  } catch (err) {
    code = 1;
    if (err instanceof CheckFailed) console.error(`FAIL: ${err.message}`);
    else console.error(`FAIL: unexpected error: ${err.stack || err}`);
  } finally {
    await nc.drain().catch(() => {});
  }
  log(`done in ${((Date.now() - t0) / 1000).toFixed(2)}s, exit ${code}`);
  return code;
}

process.exitCode = await main();
