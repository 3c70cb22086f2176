-- wrk script for bench/http.py: POST /api/v1/jobs with a unique Idempotency-Key per
-- request (run nonce from the command line, wrk thread number, request counter), and a
-- one-line JSON summary at the end that bench/http.py reads.
local threads = {}
local nthreads = 0

function setup(thread)
  thread:set("tid", nthreads)
  nthreads = nthreads + 1
  table.insert(threads, thread)
end

function init(args)
  nonce = args[1] or "run"
  counter = 0
  wrk.method = "POST"
  wrk.body = '{"kind": "bench.http", "payload": "eyJuIjogMX0=", "queue": "http"}'
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  counter = counter + 1
  -- Headers given to wrk.format replace wrk.headers, so the content type goes too.
  return wrk.format(nil, nil, {
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = string.format("%s-%d-%d", nonce, tid, counter)})
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"wrk": 1, "requests": %d, "duration_us": %d, "non_2xx": %d, "socket_errors": %d, '
    .. '"p50_us": %d, "p99_us": %d}\n',
    summary.requests, summary.duration, e.status,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
