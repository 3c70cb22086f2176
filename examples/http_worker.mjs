// A headgate worker in Node.js, standard library only: the worker protocol of
// docs/api.md over plain HTTP. It runs next to Python workers under the same
// admission (rate classes, fairness, concurrency ceilings, quarantine), because every
// claim is the store's own decision.
//
//   node examples/http_worker.mjs --url http://127.0.0.1:8080 --queues polyglot \
//        --capacity 4 --kinds integrations_app.polyglot
//
// HEADGATE_URL and HEADGATE_TOKEN (a worker token: HG_API_WORKER_TOKENS) work too.
// What it does with a job: the handlers below, by kind. A job made by a Python task has
// the payload {"args": [...], "kwargs": {...}} as JSON; the result is JSON as well.
// SIGTERM or SIGINT: it stops claiming, hands back what it holds and deregisters.

import http from "node:http";
import https from "node:https";
import os from "node:os";
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

const { values: opts } = parseArgs({
  options: {
    url: { type: "string", default: process.env.HEADGATE_URL || "http://127.0.0.1:8080" },
    queues: { type: "string", default: "default" },
    kinds: { type: "string", default: "" },
    capacity: { type: "string", default: "2" },
    "lease-ms": { type: "string", default: "30000" },
    "worker-id": { type: "string" },
    "id-file": { type: "string" },
  },
});

const BASE = new URL("/api/v1/", opts.url);
const TOKEN = process.env.HEADGATE_TOKEN || "";
const CAPACITY = Number(opts.capacity);
const LEASE_MS = Number(opts["lease-ms"]);
const AGENT = `node/${process.versions.node} headgate-example-worker/1`;

// kind -> async (args, kwargs, job, ctx) => result (any JSON value)
const HANDLERS = {
  // Sleeps args[0] milliseconds, reporting progress, and says who ran it.
  "integrations_app.polyglot": async ([ms = 0], _kwargs, job, ctx) => {
    await ctx.progress(0, 1, "sleeping");
    await sleep(Number(ms));
    return { ran_by: "node", job: job.id };
  },
};

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

class HttpError extends Error {
  constructor(status, body) {
    super(`${status} ${JSON.stringify(body)}`);
    this.status = status;
    this.body = body;
  }
}

// One API call: JSON in and out, a fresh Idempotency-Key per call (a retry of the
// same call would reuse it; this example does not retry a call it sent).
function call(method, path, body) {
  const url = new URL(path, BASE);
  const data = body === undefined ? "" : JSON.stringify(body);
  const headers = { "Idempotency-Key": randomUUID(), "Content-Type": "application/json",
                    "Content-Length": Buffer.byteLength(data) };
  if (TOKEN) headers.Authorization = `Bearer ${TOKEN}`;
  const lib = url.protocol === "https:" ? https : http;
  return new Promise((resolve, reject) => {
    const req = lib.request(url, { method, headers, timeout: 60_000 }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        const parsed = text ? JSON.parse(text) : null;
        if (res.statusCode >= 400) reject(new HttpError(res.statusCode, parsed));
        else resolve(parsed);
      });
    });
    req.on("timeout", () => req.destroy(new Error("request timed out")));
    req.on("error", reject);
    req.end(data);
  });
}

const running = new Map(); // job id -> {job, timer}
let workerId = null;
let stopping = false;
let quiet = false;

async function register() {
  const session = await call("POST", "workers", {
    queues: opts.queues.split(","), capacity: CAPACITY, agent: AGENT,
    kinds: opts.kinds ? opts.kinds.split(",") : [], host: os.hostname(), pid: process.pid,
    ...(opts["worker-id"] ? { worker_id: opts["worker-id"] } : {}),
  });
  workerId = session.worker_id;
  if (opts["id-file"]) {
    const { writeFileSync } = await import("node:fs");
    writeFileSync(opts["id-file"], workerId);
  }
  log(`registered as ${workerId} on ${opts.queues} (capacity ${CAPACITY})`);
  return session;
}

function log(message) {
  process.stderr.write(`http_worker: ${message}\n`);
}

async function heartbeatLoop(everyMs) {
  while (!stopping) {
    try {
      const reply = await call("POST", `workers/${workerId}/heartbeat`, {
        running: [...running.values()].map(({ job }) => ({ job_id: job.id, fence: job.fence })),
      });
      for (const { job_id } of reply.cancelled) {
        const held = running.get(job_id);
        if (held) { held.cancelled = true; log(`job ${job_id} was cancelled`); }
      }
      if (reply.signal) log(`signal ${reply.signal}`);
      quiet = reply.status === "quiet";
      if (reply.status === "stopping" || reply.status === "restarting") stop();
    } catch (err) {
      log(`heartbeat failed: ${err.message}`);
    }
    await sleep(everyMs);
  }
}

function lease(job) {
  return { lease_id: job.lease_id, fence: job.fence };
}

async function run(job) {
  const path = `workers/${workerId}/jobs/${encodeURIComponent(job.id)}`;
  const held = { job, cancelled: false };
  // Extend the lease every third of it while the handler runs.
  held.timer = setInterval(() => {
    call("POST", `${path}/extend`, { ...lease(job), lease_ms: LEASE_MS })
      .catch((err) => { held.cancelled = true; log(`job ${job.id}: lease lost (${err.message})`); });
  }, Math.max(100, LEASE_MS / 3));
  running.set(job.id, held);
  const ctx = {
    progress: (current, total, message) =>
      call("POST", `${path}/progress`, { ...lease(job), current, total, message }),
  };
  try {
    const handler = HANDLERS[job.kind];
    if (!handler) throw Object.assign(new Error(`no handler for ${job.kind}`), { undecodable: true });
    const body = JSON.parse(Buffer.from(job.payload, "base64").toString("utf8") || "{}");
    const result = await handler(body.args || [], body.kwargs || {}, job, ctx);
    if (held.cancelled) return;
    const encoded = Buffer.from(JSON.stringify(result ?? null)).toString("base64");
    await call("POST", `${path}/complete`, { ...lease(job), result: encoded });
  } catch (err) {
    if (held.cancelled) return;
    await call("POST", `${path}/fail`, {
      ...lease(job), error: String(err.stack || err),
      outcome: err.undecodable ? "undecodable" : "retry",
    }).catch((e) => log(`job ${job.id}: fail not recorded: ${e.message}`));
  } finally {
    clearInterval(held.timer);
    running.delete(job.id);
  }
}

async function claimLoop() {
  while (!stopping) {
    const free = CAPACITY - running.size;
    if (free <= 0 || quiet) { await sleep(50); continue; }
    try {
      const reply = await call("POST", `workers/${workerId}/claim`,
                               { max: free, wait_ms: 10_000, lease_ms: LEASE_MS });
      for (const job of reply.jobs) run(job);
    } catch (err) {
      log(`claim failed: ${err.message}`);
      await sleep(1000);
    }
  }
}

let stopped = null;
function stop() {
  if (stopped) return stopped;
  stopping = true;
  stopped = call("DELETE", `workers/${workerId}`)
    .then((r) => log(`deregistered; ${r.released} job(s) handed back`))
    .catch((err) => log(`deregister failed: ${err.message}`))
    .finally(() => process.exit(0));
  return stopped;
}

process.on("SIGTERM", stop);
process.on("SIGINT", stop);

const session = await register();
heartbeatLoop(session.heartbeat_ms);
await claimLoop();
