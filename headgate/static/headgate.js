/* headgate console glue: no framework, no build step.
 *
 * - Every mutation goes to /api/v1 as JSON with an Idempotency-Key generated per user
 *   action and kept on the element until the response (plus a second), so a double
 *   click — or htmx re-sending after a network error — acts once.
 * - Every request carries the per-session CSRF value as X-Headgate-CSRF (the server's
 *   session hook needs it before it lets a console session act on the API).
 * - API answers are turned into words: successes in the toast, errors in place.
 * - The live socket: topic list sent on open and after swaps, a banner while it is down,
 *   and a catch-up refresh once it is back.
 * - Selection, two-step confirmations, and a few keys (/, Esc, g then q/j/w).
 */
(function () {
  "use strict";

  // Reconnect quickly after a blip, never more than ~8 s apart (the extension's default
  // backs off to a minute, which reads as "dead" to someone watching the page).
  htmx.config.wsReconnectDelay = function (retryCount) {
    var cap = 1000 * Math.pow(2, Math.min(retryCount, 3));
    return cap * (0.5 + Math.random() / 2);
  };

  /* The ws extension hands a socket's `error` event to htmx's error log as it is, which
   * prints "[object Event]" on every failed reconnect. The sockets made here hand it an
   * Error that says what failed instead (the event stays on it as `event`). */
  htmx.createWebSocket = function (url) {
    var sock = new WebSocket(url, []);
    sock.binaryType = htmx.config.wsBinaryType;
    var handler = null;
    Object.defineProperty(sock, "onerror", {
      configurable: true,
      get: function () { return handler; },
      set: function (fn) { handler = fn; }
    });
    sock.addEventListener("error", function (evt) {
      if (typeof handler !== "function") return;
      var where = String(url).split("?")[0];
      var err = new Error("live updates: the WebSocket to " + where + " failed or dropped " +
        "(server unreachable or restarting); reconnecting");
      err.event = evt;
      handler.call(sock, err);
    });
    return sock;
  };

  /* A button in the middle of a two-step confirmation (or reading a schedule) keeps
   * its words while a live update morphs the row around it. */
  if (window.Idiomorph) {
    Idiomorph.defaults.callbacks.beforeNodeMorphed = function (oldNode) {
      return !(oldNode._hgArmed || oldNode._hgReading);
    };
  }

  function meta(name) {
    var el = document.querySelector('meta[name="' + name + '"]');
    return el ? el.getAttribute("content") || "" : "";
  }

  function newKey() {
    var bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.prototype.map.call(bytes, function (b) {
      return b.toString(16).padStart(2, "0");
    }).join("");
  }

  /* A double click whose first click's answer re-renders the job sheet lands its second
   * click on whatever button now stands there: after Retry, the requeued job's Cancel.
   * The Idempotency-Key kept on an element cannot stop that (the button is a new node,
   * or a morphed one posting elsewhere), so for the double-click interval after a
   * mutation the sheet's action buttons that a swap brings in are disabled, and only
   * those are enabled again. */
  var SETTLE_MS = 500;
  var lastMutationAt = 0;

  function settleSheet() {
    var left = lastMutationAt + SETTLE_MS - Date.now();
    var body = document.getElementById("sheet-body");
    if (left <= 0 || !body) return;
    body.querySelectorAll("button[data-mutation]:not([disabled])").forEach(function (b) {
      b.disabled = true;
      b.setAttribute("data-hg-settling", "");
      setTimeout(function () {
        if (!b.hasAttribute("data-hg-settling")) return;
        b.removeAttribute("data-hg-settling");
        b.disabled = false;
      }, left);
    });
  }
  ["htmx:afterSwap", "htmx:oobAfterSwap", "htmx:afterSettle"].forEach(function (name) {
    document.addEventListener(name, settleSheet);
  });

  function isApiPath(path) {
    var api = meta("hg-api");
    return !!api && (path === api || path.indexOf(api + "/") === 0);
  }

  function b64utf8(text) {
    var bytes = new TextEncoder().encode(text);
    var bin = "";
    bytes.forEach(function (b) { bin += String.fromCharCode(b); });
    return btoa(bin);
  }

  function setPath(obj, dotted, value) {
    var parts = dotted.split(".");
    var cur = obj;
    for (var i = 0; i < parts.length - 1; i++) {
      if (typeof cur[parts[i]] !== "object" || cur[parts[i]] === null) cur[parts[i]] = {};
      cur = cur[parts[i]];
    }
    cur[parts[parts.length - 1]] = value;
  }

  function inputFor(scope, name) {
    var sel = '[name="' + CSS.escape(name) + '"]';
    return (scope.querySelector && scope.querySelector(sel)) ||
      document.querySelector(sel + "[data-json]");
  }

  /* JSON bodies for the API. Types come from the inputs: type=number → number,
   * data-json=bool → true/false, data-json=array → list, data-json=base64 → bytes;
   * data-body holds the fixed part of the body (already typed JSON). */
  htmx.defineExtension("hg-json", {
    onEvent: function (name, evt) {
      if (name !== "htmx:configRequest") return;
      var d = evt.detail;
      d.headers["X-Headgate-CSRF"] = meta("hg-csrf");
      if (d.verb === "get" || !isApiPath(d.path)) return;
      var elt = d.elt;
      d.headers["Content-Type"] = "application/json";
      if (!elt._hgKey) elt._hgKey = newKey();
      d.headers["Idempotency-Key"] = elt._hgKey;
      lastMutationAt = Date.now();
      var from = elt.getAttribute("data-path-from");
      if (from) {
        var value = d.parameters[from];
        if (Array.isArray(value)) value = value[0];
        d.path = d.path.replace("{" + from + "}", encodeURIComponent(String(value || "").trim()));
      }
    },
    /* Live messages (xhr is null: the ws extension) are out-of-band fragments. Each one
     * is morphed into its element (idiomorph: the same nodes stay, so focus, selection
     * and an open <details> survive), and a fragment whose element is not on this page
     * (a row that scrolled off with a new page, a closed sheet) is dropped instead of
     * becoming an htmx:oobErrorNoTarget. */
    transformResponse: function (text, xhr, elt) {
      if (xhr) return text;
      var tpl = document.createElement("template");
      tpl.innerHTML = text;
      Array.prototype.slice.call(tpl.content.children).forEach(function (child) {
        if (!child.id || !document.getElementById(child.id)) {
          child.remove();
          return;
        }
        if ((child.getAttribute("hx-swap-oob") || "true") === "true") {
          child.setAttribute("hx-swap-oob", "morph");
        }
      });
      return tpl.innerHTML;
    },
    encodeParameters: function (xhr, parameters, elt) {
      if (!elt.hasAttribute("data-mutation")) return null;
      xhr.overrideMimeType("text/json");
      var body = {};
      if (elt._hgBody) {
        body = elt._hgBody; // read from the API at click time (a schedule's pause/resume)
        elt._hgBody = null; // once: a later click reads the schedule again
      } else {
        try { body = JSON.parse(elt.getAttribute("data-body") || "{}"); } catch (e) { body = {}; }
      }
      var scope = elt.tagName === "FORM" ? elt : (elt.closest("form") || elt);
      var skip = elt.getAttribute("data-path-from");
      var arrays = {};
      parameters.forEach(function (raw, key) {
        if (key === skip) return;
        var input = inputFor(scope, key);
        var kind = input ? (input.getAttribute("data-json") ||
          (input.type === "number" ? "number" : "string")) : "string";
        if (kind === "array") {
          (arrays[key] = arrays[key] || []).push(raw);
          return;
        }
        var value = raw;
        if (kind === "number") {
          if (raw === "") return;
          value = Number(raw);
        } else if (kind === "bool") {
          value = true;
        } else if (kind === "base64") {
          // An edit form's unchanged text sends the stored bytes, not the text's UTF-8.
          var original = input.getAttribute("data-original");
          value = original !== null && input.value === input.defaultValue ? original : b64utf8(raw);
        }
        setPath(body, key, value);
      });
      Object.keys(arrays).forEach(function (k) { setPath(body, k, arrays[k]); });
      if (scope.tagName === "FORM") {
        scope.querySelectorAll('input[type=checkbox][data-json="bool"]').forEach(function (cb) {
          if (!cb.checked) setPath(body, cb.name, false);
        });
      }
      return JSON.stringify(body);
    }
  });

  /* -- feedback ------------------------------------------------------------------- */
  var flashTimer = null;
  function flash(text, tone) {
    var el = document.getElementById("flash");
    if (!el) return;
    el.textContent = text;
    el.className = "flash show " + (tone || "ok");
    clearTimeout(flashTimer);
    flashTimer = setTimeout(function () { el.className = "flash"; }, tone === "error" ? 12000 : 5000);
  }

  /* `quiet`: said in place only (the answer is on the page already); without a place
   * to say it, the toast still does. */
  function sayInPlace(elt, text, tone, quiet) {
    var attached = document.body.contains(elt);
    var scope = attached && elt.closest ? elt.closest("[data-scope]") : null;
    var slot = scope ? scope.querySelector("[data-feedback]") : null;
    if (slot) {
      slot.textContent = text;
      slot.className = "feedback " + tone;
      if (quiet) return;
    }
    flash(text, tone);
  }

  function errorText(status, body) {
    var msg = body && typeof body.error === "string" ? body.error : "";
    if (status === 401) return "Not signed in, or the token was refused: " + (msg || "sign in again") + ".";
    if (status === 403) return "Refused: " + (msg || "forbidden") + ".";
    if (status === 409 && body && body.existing_id) return msg + " (existing job " + body.existing_id + ").";
    if (status === 423 && body && body.fingerprint) return msg + ": " + body.fingerprint + ".";
    if (status === 429 && body && body.queue !== undefined) {
      return "Queue " + body.queue + " is at its enqueue limit (" + body.current + " of " + body.limit + ").";
    }
    if (status >= 500) return "The server failed (" + status + ")" + (msg ? ": " + msg : "") + ".";
    return msg ? "Refused: " + msg + "." : "Request failed (" + status + ").";
  }

  function successText(done, body, xhr) {
    if (body && Array.isArray(body.succeeded)) {
      var n = body.succeeded.length;
      var text = done + " " + n + " job" + (n === 1 ? "" : "s") + ".";
      if (body.failed && body.failed.length) {
        text += " " + body.failed.length + " could not be: " + body.failed[0].reason +
          (body.failed.length > 1 ? " (and others)" : "") + ".";
      }
      return text;
    }
    var released = xhr.getResponseHeader("x-released-jobs");
    if (released !== null) return done + " (" + released + " job" + (released === "1" ? "" : "s") + ")";
    return done;
  }

  function refreshRegion(selector) {
    if (!document.querySelector(selector)) return;
    htmx.ajax("GET", location.pathname + location.search,
      { target: selector, select: selector, swap: "outerHTML" });
  }

  /* -- what-if (POST /simulate): the answer as a small table beside its form -------- */
  function span(ms) {
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 90000) return Math.round(ms / 1000) + " s";
    if (ms < 5400000) return (Math.round(ms / 6000) / 10) + " min";
    return (Math.round(ms / 360000) / 10) + " h";
  }

  var NO_START = {
    queue_paused: "queue paused", rate_class_paused: "class paused",
    weight_exceeds_burst: "weight over burst", quarantined: "quarantined",
    no_live_worker: "no live worker", no_measurements: "not measured yet",
    pending: "pending", not_waiting: "nothing waiting"
  };

  function guess(p) {
    if (!p) return "—";
    if (p.ms === null || p.ms === undefined) return NO_START[p.reason] || p.reason || "unknown";
    if (p.ms <= 0) return "now";
    return "~" + span(p.ms) + " (" + span(p.p10_ms) + "–" + span(p.p90_ms) + ")";
  }

  function renderSimulation(elt, body) {
    var slot = elt.nextElementSibling;
    if (!slot || !slot.hasAttribute("data-simulation") || !body) return;
    slot.textContent = "";
    var lead = document.createElement("p");
    lead.className = "simulation-lead";
    lead.textContent = "Backlog drains in " + guess(body.before.time_to_drain) +
      " now; " + guess(body.after.time_to_drain) + " with the change.";
    slot.appendChild(lead);
    if (!body.queues.length) return;
    var table = document.createElement("table");
    table.className = "grid compact";
    var head = table.createTHead().insertRow();
    ["Queue", "Waiting", "Drains now", "With the change", "Oldest starts now",
      "With the change"].forEach(function (label) {
      var th = document.createElement("th");
      th.scope = "col";
      th.textContent = label;
      head.appendChild(th);
    });
    var tbody = table.createTBody();
    body.queues.forEach(function (q) {
      var row = tbody.insertRow();
      row.setAttribute("data-queue", q.queue);
      [q.queue, String(q.waiting), guess(q.before.time_to_drain), guess(q.after.time_to_drain),
        guess(q.before.oldest_start), guess(q.after.oldest_start)].forEach(function (text) {
        row.insertCell().textContent = text;
      });
    });
    slot.appendChild(table);
  }

  /* The answer is handled on the XHR itself, not on htmx:afterRequest: a live update may
   * replace the clicked button (e.g. the job's sheet re-rendered because the action
   * changed the job) before the response arrives, and events on a detached element
   * never reach document listeners. */
  function onAnswer(elt, xhr, sent) {
    if (!xhr.status) return; // network failure: keep the key, see sendError
    setTimeout(function () { elt._hgKey = null; }, 1000);
    elt._hgBody = null;
    var body = null;
    try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
    if (xhr.status >= 200 && xhr.status < 300) {
      sayInPlace(elt, successText(sent.done, body, xhr), "ok", sent.quiet);
      if (sent.then && body && body.id) {
        htmx.ajax("GET", sent.then.replace("__ID__", encodeURIComponent(body.id)),
          { target: sent.thenTarget, swap: "innerHTML" });
      }
      if (sent.refresh) refreshRegion(sent.refresh);
      if (sent.simulate) renderSimulation(elt, body);
    } else {
      sayInPlace(elt, errorText(xhr.status, body), "error");
    }
  }

  document.addEventListener("htmx:beforeRequest", function (evt) {
    var elt = evt.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-mutation")) return;
    var xhr = evt.detail.xhr;
    // What the button said when it was clicked: a live update morphs the same element
    // into its successor (Pause becomes Resume) before the answer may arrive.
    var sent = {
      done: elt.getAttribute("data-done") || "Done.",
      then: elt.getAttribute("data-then"),
      thenTarget: elt.getAttribute("data-then-target"),
      refresh: elt.getAttribute("data-refresh"),
      quiet: elt.hasAttribute("data-quiet"),
      simulate: elt.hasAttribute("data-simulate")
    };
    xhr.addEventListener("loadend", function () { onAnswer(elt, xhr, sent); });
  });

  document.addEventListener("htmx:sendError", function (evt) {
    flash("Could not reach the server. Nothing was changed that we know of; try again.", "error");
  });

  document.addEventListener("htmx:responseError", function (evt) {
    var elt = evt.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-mutation")) return; // handled above
    flash("The page could not load that (" + evt.detail.xhr.status + ").", "error");
  });

  /* -- two-step confirmation (no blocking dialogs) ---------------------------------- */
  document.addEventListener("htmx:confirm", function (evt) {
    var elt = evt.detail.elt;
    var question = elt.getAttribute && elt.getAttribute("data-confirm");
    if (!question) return;
    if (elt._hgArmed) {
      elt._hgArmed = false;
      elt.textContent = elt._hgLabel;
      elt.classList.remove("armed");
      return; // second click: go ahead
    }
    evt.preventDefault();
    elt._hgArmed = true;
    elt._hgLabel = elt.textContent;
    elt.textContent = question;
    elt.classList.add("armed");
    setTimeout(function () {
      if (!elt._hgArmed) return;
      elt._hgArmed = false;
      elt.textContent = elt._hgLabel;
      elt.classList.remove("armed");
    }, 4000);
  });

  /* -- a periodic schedule's pause/resume ---------------------------------------------
   * PUT /periodic/{id} replaces the whole schedule, payload included, and pages never
   * carry payloads (they are hidden unless asked for). So the click reads the schedule
   * with its payload from the API, then PUTs every field back with only `paused`
   * changed: the same request any API client would make, through the same checks. */
  function readSchedule(id) {
    return fetch(meta("hg-api") + "/periodic?include_payload=true", {
      headers: { "X-Headgate-CSRF": meta("hg-csrf"), "Accept": "application/json" },
      credentials: "same-origin"
    }).then(function (resp) {
      return resp.json().catch(function () { return null; }).then(function (body) {
        if (!resp.ok) throw new Error(errorText(resp.status, body));
        var list = Array.isArray(body) ? body : (body && body.schedules) || [];
        var found = list.filter(function (s) { return s && s.id === id; })[0];
        if (!found) throw new Error("This schedule no longer exists; reload the page.");
        return found;
      });
    });
  }

  document.addEventListener("htmx:confirm", function (evt) {
    var elt = evt.detail.elt;
    var id = elt.getAttribute && elt.getAttribute("data-schedule-toggle");
    if (id === null || id === undefined) return;
    if (elt._hgBody) return; // read already (see below): let htmx send it
    evt.preventDefault();
    if (elt._hgReading) return; // a second click while the first is still reading
    elt._hgReading = true;
    elt.disabled = true;
    readSchedule(id).then(function (sched) {
      var body = {};
      Object.keys(sched).forEach(function (k) { if (k !== "id") body[k] = sched[k]; });
      body.paused = elt.getAttribute("data-paused") === "true";
      elt._hgReading = false;
      elt.disabled = false;
      if (document.body.contains(elt)) {
        elt._hgBody = body;
        evt.detail.issueRequest(true);
        return;
      }
      // A live update replaced the row while the schedule was read (htmx drops a
      // request whose element left the page): click its successor, if it still
      // offers the same change.
      var next = document.querySelector('[data-schedule-toggle="' + CSS.escape(id) +
        '"][data-paused="' + elt.getAttribute("data-paused") + '"]');
      if (!next) {
        flash("The schedule changed meanwhile; nothing was changed.", "error");
        return;
      }
      next._hgBody = body;
      next.click();
    }, function (err) {
      elt._hgReading = false;
      elt.disabled = false;
      var offline = !err || err instanceof TypeError; // fetch's network failure
      sayInPlace(elt, offline ? "Could not reach the server; nothing was changed." : err.message, "error");
    });
  });

  /* -- selection ------------------------------------------------------------------ */
  var selected = new Set();

  function rowBoxes() {
    return document.querySelectorAll('#jobs-table input[name="ids"]');
  }

  /* Which states each selection button acts on (#selbar's data-sources, from the
   * server's rules): a button stays off while no selected job is in one of them. */
  function selectionSources() {
    var bar = document.getElementById("selbar");
    try { return JSON.parse((bar && bar.getAttribute("data-sources")) || "{}"); } catch (e) { return {}; }
  }

  function buttonAction(btn) {
    try { return JSON.parse(btn.getAttribute("data-body") || "{}").action || ""; } catch (e) { return ""; }
  }

  function updateSelbar() {
    var present = new Set();
    var states = new Set();
    rowBoxes().forEach(function (cb) {
      present.add(cb.value);
      if (selected.has(cb.value)) states.add(cb.getAttribute("data-state"));
    });
    selected.forEach(function (id) { if (!present.has(id)) selected.delete(id); });
    var count = document.getElementById("selcount");
    if (count) {
      count.textContent = selected.size ? selected.size + " selected" : "Select jobs";
    }
    var sources = selectionSources();
    document.querySelectorAll('[data-name="selaction"]').forEach(function (btn) {
      if (btn.getAttribute("aria-disabled") === "true") return; // read-only stays off
      var action = buttonAction(btn);
      var from = sources[action];
      var fits = !from || from.some(function (st) { return states.has(st); });
      btn.disabled = selected.size === 0 || !fits;
      if (selected.size && !fits) {
        btn.title = "None of the selected jobs can be " + (action === "retry" ? "retried" :
          action === "cancel" ? "cancelled" : action + "d") + ": that needs a job that is " +
          from.join(", ") + ".";
      } else {
        btn.removeAttribute("title");
      }
    });
    var all = document.getElementById("select-all");
    if (all && !all.disabled) {
      var boxes = rowBoxes();
      all.checked = boxes.length > 0 && selected.size === boxes.length;
      all.indeterminate = selected.size > 0 && selected.size < boxes.length;
    }
  }

  function restoreSelection() {
    rowBoxes().forEach(function (cb) { cb.checked = selected.has(cb.value); });
    var open = document.querySelector("#job-sheet[data-open-job]");
    var openId = open ? open.getAttribute("data-open-job") : null;
    document.querySelectorAll("#jobs-table tr.jobrow").forEach(function (tr) {
      tr.classList.toggle("open", tr.getAttribute("data-job-id") === openId);
    });
    updateSelbar();
  }

  document.addEventListener("change", function (evt) {
    var t = evt.target;
    if (t.matches('#jobs-table input[name="ids"]')) {
      if (t.checked) selected.add(t.value); else selected.delete(t.value);
      updateSelbar();
    } else if (t.id === "select-all") {
      rowBoxes().forEach(function (cb) {
        cb.checked = t.checked;
        if (t.checked) selected.add(cb.value); else selected.delete(cb.value);
      });
      updateSelbar();
    } else if (t.matches("select[data-autosubmit]") && t.form) {
      t.form.requestSubmit();
    }
  });

  document.addEventListener("click", function (evt) {
    var t = evt.target;
    var dismiss = t.closest && t.closest("[data-dismiss]");
    if (dismiss) {
      var target = document.querySelector(dismiss.getAttribute("data-dismiss"));
      // "Never mind" also takes back what the dry run said ("Counted; confirm below.").
      var scope = dismiss.closest("[data-scope]");
      var slot = scope ? scope.querySelector("[data-feedback]") : null;
      if (slot) { slot.textContent = ""; slot.className = "feedback"; }
      if (target) target.innerHTML = "";
      return;
    }
    var again = t.closest && t.closest("[data-refresh-now]");
    if (again) {
      refreshRegion(again.getAttribute("data-refresh-now"));
      return;
    }
    // A click anywhere on a job row opens its sheet (the id link stays the keyboard path).
    var row = t.closest && t.closest("#jobs-table tr.jobrow");
    if (row && !t.closest("a, input, button, label")) {
      var link = row.querySelector("td.id a");
      if (link) link.click();
    }
  });

  /* -- live socket ----------------------------------------------------------------- */
  var socket = null;
  var lastTopics = "";
  var wasDown = false;
  var unloading = false;
  var bannerTimer = null;

  function topics() {
    var set = new Set();
    document.querySelectorAll("[data-topic]").forEach(function (el) {
      set.add(el.getAttribute("data-topic"));
    });
    return Array.from(set).sort();
  }

  function sendTopics(force) {
    if (!socket) return;
    var msg = JSON.stringify({ topics: topics(), query: location.search });
    if (!force && msg === lastTopics) return;
    lastTopics = msg;
    try { socket.send(msg); } catch (e) { /* reconnect will resend */ }
  }

  function setLive(state) {
    var pill = document.getElementById("live-pill");
    var banner = document.getElementById("live-banner");
    if (pill) {
      pill.textContent = state === "up" ? "live" : state === "down" ? "reconnecting…" : "connecting…";
      pill.className = "pill live-" + state;
    }
    clearTimeout(bannerTimer);
    if (!banner) return;
    if (state === "up") {
      banner.hidden = true;
    } else if (state === "down") {
      // Only for a real outage, not a blink.
      bannerTimer = setTimeout(function () { banner.hidden = false; }, 1500);
    }
  }

  window.addEventListener("pagehide", function () { unloading = true; });
  window.addEventListener("beforeunload", function () { unloading = true; });

  document.addEventListener("htmx:wsOpen", function (evt) {
    socket = evt.detail.socketWrapper;
    setLive("up");
    sendTopics(true);
    if (wasDown) {
      wasDown = false;
      refreshRegion("#main"); // catch up on what happened while we were away
    }
  });

  document.addEventListener("htmx:wsClose", function (evt) {
    if (unloading) return;
    wasDown = true;
    setLive("down");
    var code = evt.detail.event ? evt.detail.event.code : 0;
    // The ws extension itself retries only 1006/1011/1012/1013; retry the rest too.
    if ([1006, 1011, 1012, 1013].indexOf(code) < 0 && evt.detail.socketWrapper) {
      setTimeout(function () { evt.detail.socketWrapper.reconnect(); }, 1000 + Math.random() * 2000);
    }
  });

  /* A bulk operation that finished reloads the list it changed, once (its panel, pushed
   * live or loaded when it was started, carries data-op-finished, and stays). */
  function reloadAfterOperations() {
    document.querySelectorAll("[data-op-finished]").forEach(function (el) {
      if (el._hgSeen) return;
      el._hgSeen = true;
      refreshRegion(document.getElementById("job-list") ? "#job-list" : "#main");
      var words = el.getAttribute("data-op-words");
      if (words) flash(words, "ok");
    });
  }

  document.addEventListener("htmx:wsAfterMessage", function () {
    restoreSelection();
    sendTopics(false);
    reloadAfterOperations();
  });

  /* Closing the sheet (Esc or its Close link) puts focus back on the job's row link,
   * where the keyboard left off, instead of dropping it on the body. */
  var openJob = null;
  function rememberOpenJob() {
    var open = document.querySelector("#job-sheet.open[data-open-job]");
    var id = open ? open.getAttribute("data-open-job") : null;
    if (!id && openJob) {
      var link = document.querySelector('#jobs-table tr[data-job-id="' + CSS.escape(openJob) +
        '"] td.id a');
      var active = document.activeElement;
      var typing = active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName);
      if (link && !typing) link.focus();
    }
    openJob = id;
  }

  document.addEventListener("htmx:afterSettle", function (evt) {
    if (evt.detail.target && evt.detail.target.id === "main") selected.clear();
    rememberOpenJob();
    var sheet = document.querySelector("#job-sheet.open");
    if (sheet && evt.detail.target && evt.detail.target.id === "job-sheet" &&
        window.matchMedia("(max-width: 760px)").matches) {
      sheet.scrollIntoView({ block: "start" }); // on a phone the sheet opens above the list
    }
    restoreSelection();
    sendTopics(false);
    reloadAfterOperations();
  });

  /* -- chart readout: the numbers of the minute under the pointer ----------------- */
  function readout(hit) {
    var fig = hit.closest("[data-chart]");
    if (!fig) return;
    var d = hit.dataset;
    var line = fig.querySelector("line.guide");
    if (line) { line.setAttribute("x1", d.cx); line.setAttribute("x2", d.cx); }
    var out = fig.querySelector("[data-readout]");
    if (out) {
      out.textContent = d.at + " — arrived " + d.arrived + " · completed " + d.completed +
        " · failed " + d.failed + " · held back " + d.rejected + " jobs";
      out.classList.add("on");
    }
  }
  document.addEventListener("pointerover", function (evt) {
    var hit = evt.target.closest && evt.target.closest("svg.history rect.hit");
    if (hit) readout(hit);
  });
  document.addEventListener("pointerdown", function (evt) {
    var hit = evt.target.closest && evt.target.closest("svg.history rect.hit");
    if (hit) readout(hit);
  });

  /* -- keys ------------------------------------------------------------------------ */
  var gPending = false;
  document.addEventListener("keydown", function (evt) {
    var t = evt.target;
    var typing = t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName));
    if (evt.key === "Escape") {
      var close = document.querySelector("[data-close-sheet]");
      if (close && !typing) { close.click(); evt.preventDefault(); }
      return;
    }
    if (typing || evt.ctrlKey || evt.metaKey || evt.altKey) return;
    if (evt.key === "/") {
      var q = document.getElementById("q");
      if (q) { q.focus(); q.select(); evt.preventDefault(); }
      return;
    }
    if (gPending) {
      gPending = false;
      var target = { q: 0, j: 1, w: 7 }[evt.key];
      var links = document.querySelectorAll(".mainnav a");
      if (target !== undefined && links[target]) { links[target].click(); evt.preventDefault(); }
      return;
    }
    if (evt.key === "g") { gPending = true; setTimeout(function () { gPending = false; }, 1500); }
  });

  document.addEventListener("DOMContentLoaded", function () {
    setLive("connecting");
    restoreSelection();
    rememberOpenJob();
  });
})();
